"""The ``fa2`` examples about the releases a repository allows: ``attn_implementation`` came in transformers
4.36.0, and its SDPA needs torch 2.1.1."""

from optimizations.registry import Example

BF16_LOOP = """\
import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("m", torch_dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters())
for batch in loader:
    model(**batch).loss.backward()
    optimizer.step()
"""

RELEASES = (
    Example(
        "transformers_pinned_before_attn_implementation",
        # jiaweizzhao/GaLore pins transformers 4.31.0 in exp_requirements.txt
        before=BF16_LOOP,
        files={"exp_requirements.txt": "torch\ntransformers==4.31.0\n"},
        refusal="exp_requirements.txt:2: transformers==4.31.0 keeps transformers below 4.36.0",
    ),
    Example(
        "torch_pinned_before_sdpa",
        # databrickslabs/dolly pins torch>=1.13.1,<2 in requirements.txt
        before=BF16_LOOP,
        files={"requirements.txt": "torch>=1.13.1,<2\ntransformers[torch]>=4.25.1,<5\n"},
        refusal="requirements.txt:1: torch>=1.13.1,<2 keeps torch below 2.1.1",
    ),
)
