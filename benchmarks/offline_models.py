"""Models a run cannot download, built from their architecture config with random weights.

A benchmark runner has no network, so a program that names a hub model (``AutoModelForCausalLM.from_pretrained(
"Qwen/Qwen2.5-7B-Instruct")``, TRL's ``SFTTrainer(model="Qwen/...")``) could not load it. Inside
:func:`offline_models`, ``from_pretrained`` of an id in the table, on transformers' ``AutoConfig``, auto model
classes, model classes, ``AutoTokenizer``, ``AutoProcessor`` and tokenizer classes, gives instead:

- the config ``AutoConfig.for_model(**entry)``, with the config fields the call passes, its special token ids
  those of the local tokenizer and ``architectures`` the family's causal LM when the entry names none;
- a model of that config with random weights, in the ``dtype`` asked for (``"auto"`` or none: the config's, else
  float32), with the ``attn_implementation`` asked for, on the ``device_map``'s device (``"auto"``: CUDA when
  there is one). Other loading options (quantization among them) are ignored;
- a byte-level tokenizer built locally (:func:`local_tokenizer`), for processors too.

Other ids, and local paths, load as before. The launcher runs every program, on every rank, inside
:func:`from_environment`, the table that :data:`ENVIRONMENT` holds.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if (
    TYPE_CHECKING
):  # torch and transformers load with the program, not with the bench runner that names this module
    import torch

ENVIRONMENT = "PERFBOT_OFFLINE_MODELS"
EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = (EOS_TOKEN, PAD_TOKEN, "<|im_start|>", "<|im_end|>")
"""The local tokenizer's special tokens, ids 256 on (after the 256 bytes)."""
TOKENIZER_SIZE = 256 + len(SPECIAL_TOKENS)
"""How many ids the local tokenizer uses: a model's ``vocab_size`` must be at least this."""

# ChatML, with the assistant's turns (their end-of-turn token included) in {% generation %} blocks so that TRL's
# assistant-only loss can mask them.
CHAT_TEMPLATE = """\
{%- for message in messages %}
    {%- if message['role'] == 'assistant' %}
        {{- '<|im_start|>assistant\\n' }}
        {%- generation %}{{- message['content'] + '<|im_end|>' }}{%- endgeneration %}
        {{- '\\n' }}
    {%- else %}
        {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}"""

# The tokenizer options a from_pretrained call may pass on to the tokenizer it builds.
_TOKENIZER_OPTIONS = frozenset(
    {
        "padding_side",
        "truncation_side",
        "model_max_length",
        "bos_token",
        "eos_token",
        "pad_token",
        "chat_template",
    }
)
_DEVICE_MAP_STRATEGIES = frozenset({"auto", "balanced", "balanced_low_0", "sequential"})


def local_tokenizer(model_id: str, **options: Any) -> Any:
    """A ``PreTrainedTokenizerFast`` that needs no files: byte-level BPE without merges, so it encodes any text.

    Ids 0-255 are the bytes, then ``<|endoftext|>`` (eos), ``<|pad|>`` (pad), ``<|im_start|>`` and
    ``<|im_end|>``; its chat template is ChatML. ``options`` are tokenizer init options (``padding_side``...).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={symbol: index for index, symbol in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(
        [AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS]
    )
    settings = {
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "additional_special_tokens": list(SPECIAL_TOKENS[2:]),
        "chat_template": CHAT_TEMPLATE,
        **options,
    }
    return PreTrainedTokenizerFast(tokenizer_object=backend, name_or_path=model_id, **settings)


def _set_known(config: Any, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Set the fields ``config`` has; returns the others."""
    unused = {}
    for key, value in fields.items():
        if hasattr(config, key):
            setattr(config, key, value)
        else:
            unused[key] = value
    return unused


def _config(model_id: str, entry: Mapping[str, Any]) -> Any:
    """The config of ``entry``, named ``model_id``, using the local tokenizer's special tokens."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    try:
        config = AutoConfig.for_model(**entry)
    except (TypeError, ValueError) as error:
        raise ValueError(f"offline model {model_id!r}: {error}") from error
    vocab_size = config.get_text_config().vocab_size
    if vocab_size < TOKENIZER_SIZE:
        raise ValueError(
            f"offline model {model_id!r}: vocab_size {vocab_size} is smaller than the {TOKENIZER_SIZE} ids of the "
            f"local tokenizer; give a vocab_size of at least {TOKENIZER_SIZE}"
        )
    config.name_or_path = model_id
    if not config.architectures and config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
    eos, pad = (256 + SPECIAL_TOKENS.index(token) for token in (EOS_TOKEN, PAD_TOKEN))
    _set_known(config.get_text_config(), {"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": pad})
    return config


def _device(device_map: Any) -> torch.device:
    """The one device a ``device_map`` puts a model on."""
    import torch

    if isinstance(device_map, dict):
        device_map = device_map.get("", "auto")
    if device_map is None:
        return torch.device("cpu")
    if isinstance(device_map, int):
        return torch.device("cuda", device_map)
    if device_map in _DEVICE_MAP_STRATEGIES:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device_map)


def _model(build: Callable[..., Any], model_id: str, entry: Mapping[str, Any], kwargs: dict[str, Any]) -> Any:
    """A model with random weights that ``build(config, **options)`` makes, for ``from_pretrained(model_id, **kwargs)``."""
    import torch
    from transformers import PretrainedConfig

    dtype = kwargs.pop("dtype", None)
    torch_dtype = kwargs.pop("torch_dtype", None)
    dtype = torch_dtype if dtype is None else dtype
    attn_implementation = kwargs.pop("attn_implementation", None)
    device = _device(kwargs.pop("device_map", None))
    config = kwargs.pop("config", None)
    if not isinstance(config, PretrainedConfig):
        config = _config(model_id, entry)
    _set_known(config, kwargs)
    if dtype is None or dtype == "auto":
        dtype = config.dtype or torch.get_default_dtype()
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    options: dict[str, Any] = {"dtype": dtype}
    if attn_implementation is not None:
        options["attn_implementation"] = attn_implementation
    with device:
        model = build(config, **options)
    return model.eval()  # as from_pretrained returns it


def _intercept(owner: Any, table: Mapping[str, Any], load: Callable[..., Any]) -> Callable[[], None]:
    """Make ``owner.from_pretrained(id, *args, **kwargs)`` return ``load(cls, id, kwargs)`` for the ids in ``table``.

    The positional ``args`` (model or tokenizer init inputs) are dropped. Returns the undo.
    """
    original = owner.__dict__["from_pretrained"]  # a classmethod
    pretrained = original.__func__

    @functools.wraps(pretrained)
    def from_pretrained(cls: type, pretrained_model_name_or_path: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(pretrained_model_name_or_path, str) and pretrained_model_name_or_path in table:
            return load(cls, pretrained_model_name_or_path, kwargs)
        return pretrained(cls, pretrained_model_name_or_path, *args, **kwargs)

    owner.from_pretrained = classmethod(from_pretrained)
    return functools.partial(setattr, owner, "from_pretrained", original)


def _subclasses(cls: type) -> Iterator[type]:
    subclass: type
    for subclass in cls.__subclasses__():
        yield subclass
        yield from _subclasses(subclass)


@contextlib.contextmanager
def offline_models(table: Mapping[str, Mapping[str, Any]]) -> Iterator[None]:
    """While active, ``from_pretrained`` of an id in ``table`` builds it from its entry (see the module's doc).

    ``table`` maps model ids to ``AutoConfig.for_model`` arguments: ``{"model_type": "qwen2", "hidden_size": ...}``.
    Every entry is checked on entry (a ``ValueError`` names the model id). Everything is undone on exit.
    """
    if not table:
        yield
        return
    from transformers import (
        AutoConfig,
        AutoProcessor,
        AutoTokenizer,
        PreTrainedModel,
        PreTrainedTokenizerBase,
    )
    from transformers.models.auto.auto_factory import _BaseAutoModelClass

    for model_id, entry in table.items():
        _config(model_id, entry)

    def config(cls: type, model_id: str, kwargs: dict[str, Any]) -> Any:
        return_unused_kwargs = kwargs.pop("return_unused_kwargs", False)
        built = _config(model_id, table[model_id])
        unused = _set_known(built, kwargs)
        return (built, unused) if return_unused_kwargs else built

    def auto_model(cls: Any, model_id: str, kwargs: dict[str, Any]) -> Any:
        return _model(cls.from_config, model_id, table[model_id], kwargs)

    def model(cls: Any, model_id: str, kwargs: dict[str, Any]) -> Any:
        return _model(cls._from_config, model_id, table[model_id], kwargs)

    def tokenizer(cls: type, model_id: str, kwargs: dict[str, Any]) -> Any:
        return local_tokenizer(model_id, **{key: kwargs[key] for key in _TOKENIZER_OPTIONS & kwargs.keys()})

    auto_models = [_BaseAutoModelClass, *_subclasses(_BaseAutoModelClass)]
    loaders: list[tuple[type, Callable[..., Any]]] = [
        (AutoConfig, config),
        *((auto, auto_model) for auto in dict.fromkeys(auto_models) if "from_pretrained" in vars(auto)),
        (PreTrainedModel, model),
        (AutoTokenizer, tokenizer),
        (AutoProcessor, tokenizer),
        (PreTrainedTokenizerBase, tokenizer),
    ]
    with contextlib.ExitStack() as undo:
        for owner, load in loaders:
            undo.callback(_intercept(owner, table, load))
        yield


def from_environment() -> contextlib.AbstractContextManager[None]:
    """:func:`offline_models` of the table in :data:`ENVIRONMENT` (nothing when unset).

    The variable holds a JSON object ``{model id: {"model_type": "qwen2", config field: value, ...}}``; a malformed
    one is a ``ValueError`` that names it.
    """
    text = os.environ.get(ENVIRONMENT, "")
    if not text.strip():
        return contextlib.nullcontext()
    try:
        table = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{ENVIRONMENT} is not valid JSON: {error}") from None
    if not isinstance(table, dict) or not all(
        isinstance(entry, dict) and isinstance(entry.get("model_type"), str) for entry in table.values()
    ):
        raise ValueError(
            f'{ENVIRONMENT} must be a JSON object {{model id: {{"model_type": ..., config field: value}}}}, '
            f"got {text[:200]!r}"
        )
    return offline_models(table)
