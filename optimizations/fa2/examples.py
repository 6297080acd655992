"""The ``fa2`` examples the registry runs: model-loading calls and TRL configs, edited, refused or left alone; those
kept as chosen on purpose are in :mod:`.examples_kept`."""

from optimizations.registry import Example

from .examples_kept import KEPT
from .examples_releases import RELEASES

EXAMPLES = (
    Example(
        "model_loaded_only_to_copy_its_weights",
        before="""\
import torch
from transformers import GPT2LMHeadModel

from mymodel import TinyGPT


def pretrained_tiny_gpt(name):
    model = TinyGPT()
    ours = model.state_dict()
    source = GPT2LMHeadModel.from_pretrained(name)
    theirs = source.state_dict()
    with torch.no_grad():
        for key, value in theirs.items():
            ours[key].copy_(value)
    del source
    return model
""",
        refusal="the model is loaded only to copy from (`source.state_dict` at line 11)",
    ),
    Example(
        "model_loaded_to_put_adapters_on_and_save",
        before="""\
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM


def initialise_adapters(name, out, head):
    model = AutoModelForCausalLM.from_pretrained(name, dtype="auto")
    if not isinstance(model, AutoModelForCausalLM) or not hasattr(model, "lm_head"):
        raise TypeError(name)
    model.lm_head = head
    peft_model = get_peft_model(model, LoraConfig(r=8, init_lora_weights="pissa"))
    peft_model.save_pretrained(f"{out}/adapter")
    base = peft_model.unload()
    base.save_pretrained(out)
""",
        refusal="the model is loaded only to be converted and saved (`peft_model.save_pretrained` at line 11)",
    ),
    Example(
        "model_loaded_to_merge_adapters_into_a_part",
        before="""\
from peft import PeftModel
from transformers import AutoModelForCausalLM


def merge(name, adapter, out):
    model = AutoModelForCausalLM.from_pretrained(name, dtype="auto")
    part = getattr(model, "model")
    with_adapter = PeftModel.from_pretrained(part, adapter)
    merged = with_adapter.merge_and_unload()
    setattr(model, "model", merged)
    model.save_pretrained(out)
""",
        refusal="the model is loaded only to be converted and saved (`model.save_pretrained` at line 11)",
    ),
    Example(
        "model_loaded_to_merge_an_adapter_checked_by_its_weights",
        before="""\
import torch
from peft import PeftModel
from transformers import LlamaForCausalLM

base_model = LlamaForCausalLM.from_pretrained("base", torch_dtype=torch.float16)
first_weight = base_model.model.layers[0].self_attn.q_proj.weight
before = first_weight.clone()
lora_model = PeftModel.from_pretrained(base_model, "adapter")
lora_weight = lora_model.base_model.model.model.layers[0].self_attn.q_proj.weight
lora_model = lora_model.merge_and_unload()
lora_model.train(False)
assert not torch.allclose(before, first_weight)
state = {k: v for k, v in lora_model.state_dict().items() if "lora" not in k}
LlamaForCausalLM.save_pretrained(base_model, "./hf_ckpt", state_dict=state)
""",
        refusal="loaded only to be converted and saved (`LlamaForCausalLM.save_pretrained` at line 14)",
    ),
    Example(
        "adapter_merged_by_flags_on_each_layer_then_exported",
        before="""\
import torch
from peft import PeftModel
from transformers import LlamaForCausalLM

base_model = LlamaForCausalLM.from_pretrained("base", torch_dtype=torch.float16, device_map={"": "cpu"})
lora_model = PeftModel.from_pretrained(base_model, "adapter")
for layer in lora_model.base_model.model.model.layers:
    layer.self_attn.q_proj.merge_weights = True
lora_model.train(False)


def renamed(key):
    layer = key.split(".")[2]  # another variable: this function's own
    return f"layers.{layer}"


torch.save({renamed(k): v for k, v in lora_model.state_dict().items()}, "consolidated.pth")
""",
        refusal="the model is loaded only to copy from (`lora_model.state_dict` at line 17)",
    ),
    Example(
        "parts_iterated_and_run_is_a_run",
        before="""\
import torch
from transformers import LlamaForCausalLM

model = LlamaForCausalLM.from_pretrained("base", torch_dtype=torch.bfloat16)
hidden = torch.zeros(1, 4, 64)
for layer in model.model.layers:
    hidden = layer(hidden)[0]
""",
        after="""\
import torch
from transformers import LlamaForCausalLM
from _perfbot_attention import pick_attention_implementation

model = LlamaForCausalLM.from_pretrained("base", torch_dtype=torch.bfloat16, attn_implementation=pick_attention_implementation(LlamaForCausalLM, dtype=torch.bfloat16, fallback=None))
hidden = torch.zeros(1, 4, 64)
for layer in model.model.layers:
    hidden = layer(hidden)[0]
""",
    ),
    Example(
        "model_looked_at_then_run",
        before="""\
from transformers import AutoModelForCausalLM


def sample(name, prompts):
    model = AutoModelForCausalLM.from_pretrained(name, dtype="bfloat16")
    print(model.lm_head.weight.dtype, model.config.vocab_size)
    model.eval()
    return [model.generate(prompt) for prompt in prompts]
""",
        after="""\
from transformers import AutoModelForCausalLM
from _perfbot_attention import pick_attention_implementation


def sample(name, prompts):
    model = AutoModelForCausalLM.from_pretrained(name, dtype="bfloat16", attn_implementation=pick_attention_implementation(AutoModelForCausalLM, name, dtype="bfloat16", fallback=None))
    print(model.lm_head.weight.dtype, model.config.vocab_size)
    model.eval()
    return [model.generate(prompt) for prompt in prompts]
""",
    ),
    Example(
        "model_loaded_for_its_remote_code_and_thrown_away",
        before="""\
import importlib

from transformers import AutoConfig, AutoModelForCausalLM


def patch_remote_attention(name, attention):
    config = AutoConfig.from_pretrained(name, trust_remote_code=True)
    AutoModelForCausalLM.from_pretrained(name, trust_remote_code=True)
    modeling = importlib.import_module(config.__class__.__module__.replace("configuration_", "modeling_"))
    modeling.Attention.forward = attention
""",
        refusal="the loaded model is thrown away (the call is a statement of its own)",
    ),
    Example(
        "model_converted_and_then_evaluated_is_run",
        before="""\
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM


def initialise_and_check(name, out, batch):
    model = AutoModelForCausalLM.from_pretrained(name, dtype="auto")
    peft_model = get_peft_model(model, LoraConfig(r=8))
    peft_model.save_pretrained(out)
    merged = peft_model.merge_and_unload()
    return merged(**batch).loss
""",
        after="""\
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
from _perfbot_attention import pick_attention_implementation


def initialise_and_check(name, out, batch):
    model = AutoModelForCausalLM.from_pretrained(name, dtype="auto", attn_implementation=pick_attention_implementation(AutoModelForCausalLM, name, dtype="auto", fallback=None))
    peft_model = get_peft_model(model, LoraConfig(r=8))
    peft_model.save_pretrained(out)
    merged = peft_model.merge_and_unload()
    return merged(**batch).loss
""",
    ),
    Example(
        "a_loaded_model_that_is_returned_is_trained",
        before="""\
from transformers import GPT2LMHeadModel


def load(name):
    model = GPT2LMHeadModel.from_pretrained(name)
    print(model.config)
    return model
""",
        after="""\
from transformers import GPT2LMHeadModel
from _perfbot_attention import pick_attention_implementation


def load(name):
    model = GPT2LMHeadModel.from_pretrained(name, attn_implementation=pick_attention_implementation(GPT2LMHeadModel, name, fallback=None))
    print(model.config)
    return model
""",
    ),
    Example(
        "sdpa_to_picker",
        before="""\
import torch
from transformers import AutoModelForCausalLM


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa", dtype=torch.bfloat16)
""",
        after="""\
import torch
from transformers import AutoModelForCausalLM
from _perfbot_attention import pick_attention_implementation


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation=pick_attention_implementation(AutoModelForCausalLM, path, dtype=torch.bfloat16), dtype=torch.bfloat16)
""",
    ),
    Example(
        "aliased_auto_class_without_attn_implementation",
        before="""\
from transformers import AutoModelForCausalLM as AM


def load(cfg):
    return AM.from_pretrained(cfg.model_path, dtype="auto")
""",
        after="""\
from transformers import AutoModelForCausalLM as AM
from _perfbot_attention import pick_attention_implementation


def load(cfg):
    return AM.from_pretrained(cfg.model_path, dtype="auto", attn_implementation=pick_attention_implementation(AM, cfg.model_path, dtype="auto", fallback=None))
""",
    ),
    Example(
        "module_import_multiline_eager_with_comments",
        before="""\
import torch
import transformers


def load(size):
    model = transformers.Qwen2ForCausalLM.from_pretrained(
        download(size),  # fetched once, cached
        attn_implementation="eager",  # from the old config
        torch_dtype=torch.bfloat16,
    )
    return model
""",
        after="""\
import torch
import transformers
from _perfbot_attention import pick_attention_implementation


def load(size):
    model = transformers.Qwen2ForCausalLM.from_pretrained(
        download(size),  # fetched once, cached
        attn_implementation=pick_attention_implementation(transformers.Qwen2ForCausalLM, dtype=torch.bfloat16, fallback="eager"),  # from the old config
        torch_dtype=torch.bfloat16,
    )
    return model
""",
    ),
    Example(
        "auto_class_checkpoint_from_a_call_is_bound_once",
        before="""\
import torch
from transformers import AutoModelForCausalLM


def load_model(size, dtype=None):
    model = AutoModelForCausalLM.from_pretrained(
        ensure_model(size),
        attn_implementation="sdpa",
        dtype=dtype or torch.bfloat16,
    )
    return model
""",
        after="""\
import torch
from transformers import AutoModelForCausalLM
from _perfbot_attention import pick_attention_implementation


def load_model(size, dtype=None):
    model = AutoModelForCausalLM.from_pretrained(
        (checkpoint := ensure_model(size)),
        attn_implementation=pick_attention_implementation(AutoModelForCausalLM, checkpoint, dtype=dtype or torch.bfloat16),
        dtype=dtype or torch.bfloat16,
    )
    return model
""",
    ),
    Example(
        "from_config_in_a_package",
        path="pkg/encoder.py",
        files={"pkg/__init__.py": ""},
        before="""\
from transformers import AutoModel


def encoder(config):
    return AutoModel.from_config(config)
""",
        after="""\
from transformers import AutoModel
from ._perfbot_attention import pick_attention_implementation


def encoder(config):
    return AutoModel.from_config(config, attn_implementation=pick_attention_implementation(AutoModel, config, fallback=None))
""",
    ),
    Example(
        "trl_model_init_kwargs_dict",
        before="""\
import torch
import trl


def train(data):
    model_init_kwargs = {
        "dtype": torch.bfloat16,  # half precision
    }
    args = trl.SFTConfig(output_dir="out", model_init_kwargs=model_init_kwargs)
    trainer = trl.SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=args, train_dataset=data)
    trainer.train()
""",
        after="""\
import torch
import trl
from _perfbot_attention import pick_attention_implementation


def train(data):
    model_init_kwargs = {
        "dtype": torch.bfloat16,  # half precision
        "attn_implementation": pick_attention_implementation(source="Qwen/Qwen2.5-0.5B", dtype=torch.bfloat16, fallback=None),
    }
    args = trl.SFTConfig(output_dir="out", model_init_kwargs=model_init_kwargs)
    trainer = trl.SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=args, train_dataset=data)
    trainer.train()
""",
    ),
    Example(
        "trl_model_init_kwargs_dict_call",
        before="""\
from trl import DPOConfig, DPOTrainer


def train(model_id, data):
    args = DPOConfig(output_dir="out", model_init_kwargs=dict(dtype="bfloat16", attn_implementation="sdpa"))
    DPOTrainer(model=model_id, args=args, train_dataset=data).train()
""",
        after="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_attention import pick_attention_implementation


def train(model_id, data):
    args = DPOConfig(output_dir="out", model_init_kwargs=dict(dtype="bfloat16", attn_implementation=pick_attention_implementation(source=model_id, dtype="bfloat16")))
    DPOTrainer(model=model_id, args=args, train_dataset=data).train()
""",
    ),
    Example(
        "trlparser_script_sets_model_init_kwargs",
        before="""\
from trl import SFTConfig, SFTTrainer, TrlParser


def main(script_args, training_args, model_args, dataset):
    training_args.model_init_kwargs = dict(
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    trainer = SFTTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=dataset)
    trainer.train()
""",
        after="""\
from trl import SFTConfig, SFTTrainer, TrlParser
from _perfbot_attention import pick_attention_implementation


def main(script_args, training_args, model_args, dataset):
    training_args.model_init_kwargs = dict(
        attn_implementation=pick_attention_implementation(source=model_args.model_name_or_path, dtype=model_args.dtype, fallback=model_args.attn_implementation),
        dtype=model_args.dtype,
    )
    trainer = SFTTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=dataset)
    trainer.train()
""",
    ),
    Example(
        "already_flash_attention",
        before="""\
import torch
from transformers import AutoModelForCausalLM


def load(path, small):
    if small:
        return AutoModelForCausalLM.from_pretrained(path, attn_implementation="flash_attention_2", dtype=torch.bfloat16)
    return AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="kernels-community/vllm-flash-attn3", dtype=torch.bfloat16
    )
""",
    ),
    Example(
        "tokenizers_and_configs_untouched",
        before="""\
from transformers import AutoConfig, AutoTokenizer


def load(path):
    return AutoTokenizer.from_pretrained(path), AutoConfig.from_pretrained(path)
""",
    ),
    Example(
        "refuses_float32",
        before="""\
import torch
from transformers import AutoModelForCausalLM


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa", dtype=torch.float32)
""",
        refusal="FlashAttention and FlexAttention need bf16/fp16",
    ),
    Example(
        "run_time_choice_becomes_the_fallback",
        before="""\
import torch
from transformers import AutoModelForCausalLM


def load(model_args):
    return AutoModelForCausalLM.from_pretrained(
        model_args.model_name_or_path,
        attn_implementation=model_args.attn_implementation,
        dtype=torch.bfloat16,
    )
""",
        after="""\
import torch
from transformers import AutoModelForCausalLM
from _perfbot_attention import pick_attention_implementation


def load(model_args):
    return AutoModelForCausalLM.from_pretrained(
        model_args.model_name_or_path,
        attn_implementation=pick_attention_implementation(AutoModelForCausalLM, model_args.model_name_or_path, dtype=torch.bfloat16, fallback=model_args.attn_implementation),
        dtype=torch.bfloat16,
    )
""",
    ),
    Example(
        "refuses_attn_implementation_expression",
        before="""\
from transformers import AutoModelForCausalLM


def load(path, cfg):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation=cfg["attention"])
""",
        refusal='set from `cfg["attention"]`',
    ),
    Example(
        "refuses_hidden_kwargs",
        before="""\
from transformers import AutoModelForCausalLM


def load(path, **loading):
    return AutoModelForCausalLM.from_pretrained(path, **loading)
""",
        refusal="settings are passed through `**loading` (train.py:4), whose keys are unknown: `loading` is a parameter",
    ),
    Example(
        "beside_a_splat_that_cannot_hold_it",
        before="""\
import torch
from transformers import AutoModelForCausalLM


def load(path, revision):
    loading = dict(revision=revision, dtype=torch.bfloat16)
    return AutoModelForCausalLM.from_pretrained(path, **loading)
""",
        after="""\
import torch
from transformers import AutoModelForCausalLM
from _perfbot_attention import pick_attention_implementation


def load(path, revision):
    loading = dict(revision=revision, dtype=torch.bfloat16)
    return AutoModelForCausalLM.from_pretrained(path, **loading, attn_implementation=pick_attention_implementation(AutoModelForCausalLM, path, fallback=None))
""",
    ),
    Example(
        "refuses_model_init_kwargs_without_dtype",
        before="""\
from trl import DPOConfig, DPOTrainer


def train(model_id, data):
    args = DPOConfig(output_dir="out", model_init_kwargs={"attn_implementation": "sdpa"})
    DPOTrainer(model=model_id, args=args, train_dataset=data).train()
""",
        refusal="TRL loads the model in float32",
    ),
    Example(
        "trlparser_script_merges_the_configs_own_kwargs",
        before="""\
from trl import DPOTrainer


def main(training_args, model_args, dataset):
    init_kwargs = dict(dtype=model_args.dtype, attn_implementation=model_args.attn_implementation)
    if training_args.model_init_kwargs is not None:
        init_kwargs.update(training_args.model_init_kwargs)  # the recipe's own kwargs win
    training_args.model_init_kwargs = init_kwargs
    DPOTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=dataset).train()
""",
        after="""\
from trl import DPOTrainer
from _perfbot_attention import pick_attention_implementation


def main(training_args, model_args, dataset):
    init_kwargs = dict(dtype=model_args.dtype, attn_implementation=pick_attention_implementation(source=model_args.model_name_or_path, dtype=model_args.dtype, fallback=model_args.attn_implementation))
    if training_args.model_init_kwargs is not None:
        init_kwargs.update(training_args.model_init_kwargs)  # the recipe's own kwargs win
    training_args.model_init_kwargs = init_kwargs
    DPOTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=dataset).train()
""",
    ),
    Example(
        "refuses_a_parsed_config_whose_init_kwargs_come_from_elsewhere",
        before="""\
from trl import SFTTrainer


def main(training_args, model_args, dataset, load_kwargs):
    training_args.model_init_kwargs = load_kwargs(model_args)
    SFTTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=dataset).train()
""",
        refusal="model_init_kwargs comes from `load_kwargs(model_args)`",
    ),
    Example(
        "refuses_model_init_kwargs_model_bound_later",
        before="""\
import trl


def train(cfg, data):
    args = trl.SFTConfig(output_dir="out", model_init_kwargs={"dtype": "bfloat16"})
    model_id = cfg.model
    trl.SFTTrainer(model=model_id, args=args, train_dataset=data).train()
""",
        refusal="`model_id` is assigned after this line",
    ),
    *KEPT,
    *RELEASES,
)
