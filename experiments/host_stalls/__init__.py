"""Host-side stalls in the hand-written vision loop."""
