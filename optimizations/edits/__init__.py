"""The edit machinery: codemods and edits that several optimizations share, built on the program model's facts."""
