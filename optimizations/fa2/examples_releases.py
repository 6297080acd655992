"""The ``fa2`` examples about the transformers release a repository allows: ``attn_implementation`` came in
4.36.0."""

from optimizations.registry import Example

RELEASES = (
    Example(
        "transformers_pinned_before_attn_implementation",
        # jiaweizzhao/GaLore pins transformers 4.31.0 in exp_requirements.txt
        before="""\
import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("m", torch_dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters())
for batch in loader:
    model(**batch).loss.backward()
    optimizer.step()
""",
        files={"exp_requirements.txt": "torch\ntransformers==4.31.0\n"},
        refusal="exp_requirements.txt:2: transformers==4.31.0 keeps transformers below 4.36.0",
    ),
)
