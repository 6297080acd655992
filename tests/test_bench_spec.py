"""The bench spec built from the ``[tool.bot]`` table of a target's ``pyproject.toml``."""

from __future__ import annotations

import pytest

from benchmarks.spec import BenchOptionError, BenchSpec, BenchSpecError
from bot.benchmarking import BenchOptions, bench_spec
from bot.conventions import tool_settings
from bot.errors import BadInput

FULL = """\
[tool.bot]
size = "gpu"
seed = 11

[tool.bot.workloads.sft]
command = "python train_sft.py --size {size} --max-steps {steps} --seed {seed} --extra '{{\\"a\\": 1}}'"
steps = 40
warmup_steps = 5
repeats = 4
primary = "samples_per_s"
timeout_s = 900
gpus = 2

[tool.bot.workloads.loop]
command = "python loop.py --steps {steps}"
steps = 12
primary = "step_time_s"
higher_is_better = false
"""


def _write(tmp_path, text):
    (tmp_path / "pyproject.toml").write_text(text)
    return tmp_path


def load_spec(root):
    """The spec of a checkout, built as ``bot`` builds it."""
    return BenchSpec.from_table(tool_settings(root), root / "pyproject.toml")


def test_reads_workloads_with_defaults(tmp_path):
    spec = load_spec(_write(tmp_path, FULL))
    assert (spec.size, spec.seed) == ("gpu", 11)
    assert list(spec.workloads) == ["sft", "loop"]
    sft, loop = spec.workloads["sft"], spec.workloads["loop"]
    assert (sft.steps, sft.warmup_steps, sft.repeats, sft.primary, sft.timeout_s, sft.gpus) == (
        40,
        5,
        4,
        "samples_per_s",
        900.0,
        2,
    )
    assert sft.render(spec.size, spec.seed) == (
        "python train_sft.py --size gpu --max-steps 40 --seed 11 --extra '{{\"a\": 1}}'"
    )
    assert (loop.warmup_steps, loop.repeats, loop.gpus, loop.higher_is_better) == (2, 4, 1, False)
    # measured until precise: 4 to 20 rounds, at least the device's default time per run, 30 min in all
    assert (loop.max_repeats, loop.min_time_s, spec.time_budget_s) == (20, None, None)  # None: by device


def test_adaptive_settings_and_their_overrides(tmp_path):
    text = FULL.replace("repeats = 4\n", "repeats = 4\nmax_repeats = 8\nmin_time_s = 2.5\n")
    spec = load_spec(_write(tmp_path, text.replace("[tool.bot]\n", "[tool.bot]\ntime_budget_s = 600\n", 1)))
    sft = spec.workloads["sft"]
    assert (sft.repeats, sft.max_repeats, sft.min_time_s, spec.time_budget_s) == (4, 8, 2.5, 600.0)
    more = spec.override(repeats=12, min_time_s=0, time_budget_s=60)
    assert (more.workloads["sft"].repeats, more.workloads["sft"].max_repeats) == (12, 12)  # max follows
    assert (more.workloads["sft"].min_time_s, more.time_budget_s) == (0, 60)
    fixed = spec.override(repeats=3, max_repeats=3)
    assert {(w.repeats, w.max_repeats) for w in fixed.workloads.values()} == {(3, 3)}
    with pytest.raises(BenchOptionError, match="--max-repeats 4 is below --repeats 5"):
        spec.override(repeats=5, max_repeats=4)
    with pytest.raises(BenchOptionError, match="--time-budget"):
        spec.override(time_budget_s=0)


def test_size_defaults_to_tiny_and_warmup_fits_short_runs(tmp_path):
    spec = load_spec(_write(tmp_path, '[tool.bot.workloads.x]\ncommand = "python x.py"\nsteps = 2\n'))
    assert (spec.size, spec.seed) == ("tiny", 0)
    assert spec.workloads["x"].warmup_steps == 1


def test_overrides_select_and_rescale(tmp_path):
    spec = load_spec(_write(tmp_path, FULL))
    small = spec.override(workloads=["loop"], size="tiny", steps=6, repeats=2, warmup_steps=1, seed=3)
    assert list(small.workloads) == ["loop"]
    loop = small.workloads["loop"]
    assert (loop.steps, loop.repeats, loop.warmup_steps, small.size, small.seed) == (6, 2, 1, "tiny", 3)
    assert spec.workloads["loop"].steps == 12  # the original is untouched
    with pytest.raises(BenchOptionError, match="unknown workload.*dpo.*known: sft, loop"):
        spec.override(workloads=["dpo"])
    with pytest.raises(BenchOptionError, match="--steps 5 leaves workload sft no step to measure"):
        spec.override(steps=5)  # sft keeps 5 warm-up steps: nothing left to measure


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (BenchOptions(steps=0), "--steps must be at least 1, got 0"),
        (
            BenchOptions(steps=5),
            "--steps 5 leaves workload sft no step to measure: it warms up for 5 steps; use --steps 6 or more",
        ),
        (BenchOptions(repeats=0), "--repeats must be at least 1, got 0"),
        (BenchOptions(max_repeats=3), "--max-repeats 3 is below the 4 repeats of workload sft"),
        (BenchOptions(repeats=6, max_repeats=5), "--max-repeats 5 is below --repeats 6"),
        (BenchOptions(min_time_s=-1), "--min-time must be 0 or more, got -1"),
        (BenchOptions(time_budget_s=0), "--time-budget must be positive, got 0"),
        (BenchOptions(workloads=("dpo",)), "--workload: unknown workload(s) dpo; known: sft, loop"),
    ],
)
def test_a_bad_option_is_blamed_not_the_pyproject(tmp_path, options, said):
    """A value given on the command line that does not fit a workload names the option; the file, which is
    fine, is not the one to fix."""
    with pytest.raises(BadInput) as raised:
        bench_spec(_write(tmp_path, FULL), options)
    assert str(raised.value).startswith(said), str(raised.value)
    assert "fix [tool.bot]" not in str(raised.value)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[project]\nname = 'x'\n", "tool.bot"),
        ("[tool.bot]\nsize = 'tiny'\n", "tool.bot.workloads"),
        ("[tool.bot.workloads.sft]\nsteps = 3\n", "tool.bot.workloads.sft.command"),
        ("[tool.bot.workloads.sft]\ncommand = 'python x.py'\nsteps = '3'\n", "tool.bot.workloads.sft.steps"),
        ("[tool.bot.workloads.sft]\ncommand = 'python x.py'\nsteps = true\n", "tool.bot.workloads.sft.steps"),
        ("[tool.bot.workloads.sft]\ncommand = 'x'\nsteps = 3\nrepeat = 2\n", "tool.bot.workloads.sft"),
        (
            "[tool.bot.workloads.sft]\ncommand = 'x'\nsteps = 3\nrepeats = 0\n",
            "tool.bot.workloads.sft.repeats",
        ),
        ("[tool.bot]\nseed = 1.5\n[tool.bot.workloads.s]\ncommand = 'x'\nsteps = 3\n", "tool.bot.seed"),
        (
            "[tool.bot.workloads.sft]\ncommand = 'x'\nsteps = 3\nrepeats = 5\nmax_repeats = 4\n",
            "tool.bot.workloads.sft.max_repeats",
        ),
        (
            "[tool.bot.workloads.sft]\ncommand = 'x'\nsteps = 3\nmin_time_s = -1\n",
            "tool.bot.workloads.sft.min_time_s",
        ),
        (
            "[tool.bot]\ntime_budget_s = 0\n[tool.bot.workloads.s]\ncommand = 'x'\nsteps = 3\n",
            "tool.bot.time_budget_s",
        ),
        (
            "[tool.bot.workloads.s]\ncommand = 'x'\nsteps = 3\ninputs = 'data'\n",
            "tool.bot.workloads.s.inputs",
        ),
        ("[tool.bot.workloads.s]\ncommand = 'x'\nsteps = 3\ninputs = [1]\n", "tool.bot.workloads.s.inputs"),
        (
            "[tool.bot.workloads.s]\ncommand = 'x'\nsteps = 3\ninputs = ['../data']\n",
            "tool.bot.workloads.s.inputs",
        ),
        (
            "[tool.bot.workloads.sft]\ncommand = 'x'\nsteps = 3\ndirectory = '../elsewhere'\n",
            "tool.bot.workloads.sft.directory",
        ),
    ],
)
def test_errors_name_the_file_and_key(tmp_path, text, key):
    with pytest.raises(BenchSpecError) as raised:
        load_spec(_write(tmp_path, text))
    assert raised.value.key == key
    assert str(tmp_path / "pyproject.toml") in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_missing_file_or_table_says_to_run_bot_init(tmp_path):
    with pytest.raises(BenchSpecError, match="run `bot init`") as raised:
        load_spec(tmp_path)
    assert raised.value.key == "tool.bot" and str(tmp_path / "pyproject.toml") in str(raised.value)
    with pytest.raises(BenchSpecError, match="run `bot init`"):
        load_spec(_write(tmp_path, "[project]\nname = 'x'\n"))


def test_invalid_toml_names_the_file(tmp_path):
    with pytest.raises(BadInput, match="not valid TOML") as raised:
        load_spec(_write(tmp_path, "[tool.bot\n"))
    assert str(tmp_path / "pyproject.toml") in str(raised.value)
