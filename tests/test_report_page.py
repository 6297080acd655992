"""Pictures of a bench record: ``bot report``'s self-contained HTML page and the results comment's Mermaid chart.

The page is drawn from a record ``bot bench`` writes (real runs of a small torch loop through the launch wrapper,
so the tokens/s, losses and step phases are the meter's own), parsed for the record's numbers, and rendered in a
real headless Chromium (Debian's ``chromium``) with a screenshot. The comment's chart is rendered in the same
browser by Mermaid's own JavaScript (``mermaid.min.js`` from the npm package, fetched by ``.ci/run`` into
``.cache/mermaid``: nothing is fetched at test time). The browser tests skip, saying why, without either.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import struct
import subprocess
from dataclasses import dataclass
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import git
import pytest
from git_repos import commit_all, make_repo
from test_review_report import synthetic_results

from benchmarks.results import Results
from benchmarks.stats import STEPS, loss_positions
from bot import formatting
from bot.cli import main
from bot.comments.charts import throughput_chart
from bot.comments.results import render_results
from bot.conventions import TRAILER_ITEM, TRAILER_OPTIMIZATION
from bot.measurements import measurement

REPO_ROOT = Path(__file__).resolve().parents[1]
MERMAID_JS = REPO_ROOT / ".cache" / "mermaid" / "package" / "dist" / "mermaid.min.js"
CHROMIUM = shutil.which("chromium")
WINDOW = (1200, 1600)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no `chromium` on PATH (.ci/run installs Debian's chromium package)"
)

# A tiny language model learning "next token = token + 1", one batch per step, with a short wait standing in
# for the data loader: the meter sees tokens (input_ids), a loss, and all four phases.
LOOP = """\
import argparse
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int)
args = parser.parse_args()
BATCH = 8
torch.manual_seed(0)
torch.set_num_threads(1)


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(64, 32)
        self.head = torch.nn.Linear(32, 64)

    def forward(self, input_ids):
        return self.head(torch.tanh(self.embed(input_ids)))


model = TinyLM()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2)
for _ in range(args.steps):
    time.sleep(0.004)
    rows = (torch.randint(0, 64, (BATCH, 1)) + torch.arange(17)) % 64
    logits = model(rows[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), rows[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""

PYPROJECT = """\
[tool.bot.workloads.loop]
command = "python loop.py --steps {steps}"
steps = 14
warmup_steps = 2
repeats = 2
max_repeats = 2
min_time_s = 0
"""


def bot_change(repo: git.Repo, old: str, new: str, optimization: str, item: str) -> str:
    """Edit loop.py and commit it as the bot would, with its trailers."""
    path = Path(repo.working_tree_dir) / "loop.py"
    path.write_text(path.read_text().replace(old, new))
    trailers = f"{TRAILER_OPTIMIZATION}: {optimization}\n{TRAILER_ITEM}: {item}"
    return commit_all(repo, f"perf(loop): {optimization}\n\n{trailers}")


@pytest.fixture(scope="module")
def bench_record(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Results, Path]:
    """A target repository, the record ``bot bench`` wrote for its baseline and two bot commits (a rounding
    change, then a dynamics one that doubles the batch), and the page ``bot report`` drew from it."""
    root = tmp_path_factory.mktemp("report") / "target"
    repo = make_repo(root, {"loop.py": LOOP, "pyproject.toml": PYPROJECT, ".gitignore": ".bot/\n"})
    bot_change(repo, "lr=3e-2)", "lr=3e-2, foreach=False)", "fused_adamw", "A")
    bot_change(repo, "BATCH = 8", "BATCH = 16", "packing", "B")
    bench = ["bench", "HEAD~2", "HEAD~1", "HEAD", "--repo", str(root), "--max-host-load", "1"]
    assert main(bench) == 0
    page = root.parent / "page.html"
    assert main(["report", "HEAD~2..HEAD", "--repo", str(root), "--out", str(page)]) == 0
    (found,) = (root / ".bot" / "results").glob("*.json")
    return page, Results.load(found), root


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Element:
    """A parsed element: its tag, attributes, the classes of the elements around it, and its own text."""

    tag: str
    attrs: dict[str, str]
    within: tuple[str, ...]
    text: str = ""


class Elements(HTMLParser):
    """Every element of an HTML page (inline SVG included), in document order."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.all: list[Element] = []
        self._open: list[Element] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        within = tuple(name for open_ in self._open for name in open_.attrs.get("class", "").split())
        element = Element(tag, {name: value or "" for name, value in attrs}, within)
        self.all.append(element)
        if tag not in VOID:
            self._open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self._open.pop()

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop().tag != tag:
            pass

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1].text += data

    def find(self, tag: str, cls: str | None = None, within: str | None = None) -> list[Element]:
        """The ``tag`` elements of class ``cls`` inside an element of class ``within`` (None: any)."""
        return [
            element
            for element in self.all
            if element.tag == tag
            and (cls is None or cls in element.attrs.get("class", "").split())
            and (within is None or within in element.within)
        ]

    @property
    def texts(self) -> list[str]:
        """The text of every SVG ``<text>`` element."""
        return [element.text for element in self.find("text")]


def median_losses(results: Results, sha: str) -> dict[float, float]:
    """The loss at each optimizer step taken: the median over the commit's runs, computed here from the runs."""
    at_step: dict[float, list[float]] = {}
    for run in results.runs:
        if run.commit == sha and run.ok:
            for step, loss in loss_positions(run.metrics["loss"], STEPS):
                at_step.setdefault(step, []).append(loss)
    return {step: statistics.median(losses) for step, losses in at_step.items()}


@pytest.mark.slow
def test_the_page_draws_the_records_numbers_and_names_no_url(
    bench_record: tuple[Path, Results, Path],
) -> None:
    page, results, _ = bench_record
    html = page.read_text()
    page_elements = Elements(html)
    shas = [info.sha for info in results.commits]
    labels = ["base", f"A {shas[1][:7]}", f"B {shas[2][:7]}"]

    # self-contained: no script, no stylesheet or image to fetch, no URL anywhere
    assert not re.search(r"https?:|//[a-z]", html, re.IGNORECASE)
    assert not [e for e in page_elements.all if e.tag in ("script", "link", "img", "iframe", "object")]
    assert not [e for e in page_elements.all if {"src", "href"} & set(e.attrs)]
    assert len(page_elements.find("svg", "chart")) == 3

    # throughput: one bar per commit at the record's median, its whisker at the record's interval, its value
    # written above it
    bars, intervals = page_elements.find("rect", "bar"), page_elements.find("g", "interval")
    assert [bar.attrs["data-label"] for bar in bars] == labels
    for bar, interval, sha in zip(bars, intervals, shas, strict=True):
        measured = measurement(results, "loop", sha)
        assert measured is not None and measured.median is not None and measured.ci is not None
        assert float(bar.attrs["data-value"]) == measured.median
        assert (float(interval.attrs["data-low"]), float(interval.attrs["data-high"])) == measured.ci
        assert formatting.number(measured.median) in page_elements.texts

    # loss: one line per commit, a point per optimizer step at the median of the runs' logged losses
    for label, sha in zip(labels, shas, strict=True):
        (series,) = [g for g in page_elements.find("g", "series") if g.attrs["data-name"] == label]
        points = {}
        for element in page_elements.all[page_elements.all.index(series) + 1 :]:
            if element.tag == "g":
                break
            if element.tag == "circle":
                points[float(element.attrs["data-x"])] = float(element.attrs["data-y"])
        assert points == median_losses(results, sha) and len(points) == 14
    # the doubled batch learns from twice the tokens per step: at equal steps its loss ends lower
    assert median_losses(results, shas[2])[13] < median_losses(results, shas[0])[13]

    # phases: each commit's median per phase, as the record summarized them
    parts = page_elements.find("rect", "part")
    assert [part.attrs["data-part"] for part in parts] == [
        "data wait",
        "forward",
        "backward",
        "optimizer",
    ] * 3
    for index, sha in enumerate(shas):
        phases = results.summary["loop"]["commits"][sha]["metrics"]["phases"]
        drawn = [float(part.attrs["data-value"]) for part in parts[4 * index : 4 * index + 4]]
        assert drawn == [
            phases[name]["median_ms"] for name in ("data_wait", "forward", "backward", "optimizer")
        ]
        assert all(value > 0 for value in drawn)

    # each change's numerics contract, from the optimization its trailer names
    cells = [
        (cell.attrs["class"], cell.text)
        for cell in page_elements.find("td")
        if "numerics" in cell.attrs.get("class", "")
    ]
    assert cells == [("numerics-rounding", "rounding"), ("numerics-dynamics", "dynamics")]
    assert "the same AdamW update in one fused kernel" in html


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    """Headless Chromium, offline: no first-run, sync, component updates or background networking."""
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def png_size(path: Path) -> tuple[int, int]:
    """A PNG's width and height, from its IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.slow
@pytest.mark.browser
@needs_chromium
def test_the_page_renders_in_headless_chromium(
    bench_record: tuple[Path, Results, Path], tmp_path: Path
) -> None:
    page, results, _ = bench_record
    shot = tmp_path / "page.png"
    url = page.resolve().as_uri()
    chromium(
        f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}", url, profile=tmp_path / "profile"
    )
    assert png_size(shot) == WINDOW
    assert shot.stat().st_size > 40_000  # text, bars and lines: a blank page compresses to a few kB

    dom = Elements(chromium("--dump-dom", url, profile=tmp_path / "profile").stdout)
    assert len(dom.find("svg", "chart")) == 3
    assert len(dom.find("rect", "bar")) == len(results.commits)
    assert len(dom.find("circle")) == 14 * len(results.commits)
    for info in results.commits:
        measured = measurement(results, "loop", info.sha)
        assert measured is not None and formatting.number(measured.median) in dom.texts


def mermaid_blocks(body: str) -> list[str]:
    return re.findall(r"```mermaid\n(.*?)\n```", body, re.DOTALL)


def test_the_comment_chart_has_each_commits_median_and_interval() -> None:
    commits = [
        ("a" * 40, "base", []),
        ("b" * 40, "workers perf: x", ["C"]),
        ("c" * 40, "liger perf: y", ["D"]),
    ]
    results = synthetic_results(
        commits, {"sft": [1000, 1200, 1250]}, failed={(1, "sft", k) for k in range(5)}
    )
    chart = throughput_chart(results, "sft")
    assert chart.left_out == 1  # every run of C failed: no bar, no invented number
    statements = chart.source.split("xychart-beta\n", 1)[1].splitlines()
    keywords = [line.split()[0] for line in statements]
    assert keywords == ["title", "x-axis", "y-axis", "bar", "line", "line"]
    measured = [m for m in (measurement(results, "sft", sha) for sha in ("a" * 40, "c" * 40)) if m and m.ci]

    def numbers(values: list[float]) -> str:
        return "[" + ", ".join(f"{value:g}" for value in values) + "]"

    assert statements[1].strip() == 'x-axis ["base", "D ccccccc"]'
    assert statements[3].strip() == f"bar {numbers([m.median for m in measured])}"
    assert statements[4].strip() == f"line {numbers([m.ci[0] for m in measured])}"
    assert statements[5].strip() == f"line {numbers([m.ci[1] for m in measured])}"
    assert chart.source in render_results(results)
    # where a long comment needs the room, the lines go and the bars stay
    bars_only = throughput_chart(results, "sft", intervals=False)
    assert bars_only.source.startswith("xychart-beta\n") and "line [" not in bars_only.source
    assert statements[3] in bars_only.source.splitlines()


MERMAID_PAGE = """<!doctype html><html><body>
<pre id="source">{source}</pre><div id="chart"></div><pre id="status">pending</pre>
<script src="{script}"></script>
<script>
mermaid.initialize({{startOnLoad: false}});
const text = document.getElementById("source").textContent;
mermaid.parse(text)
  .then(() => mermaid.render("rendered", text))
  .then(({{svg}}) => {{
    document.getElementById("chart").innerHTML = svg;
    document.getElementById("status").textContent = "rendered";
  }})
  .catch((error) => {{ document.getElementById("status").textContent = "error: " + (error.message || error); }});
</script></body></html>
"""


def rendered_by_mermaid(source: str, folder: Path, name: str) -> Elements:
    """The DOM of a page that renders ``source`` with Mermaid in headless Chromium, once its promises settle."""
    page = folder / f"{name}.html"
    page.write_text(MERMAID_PAGE.format(source=escape(source), script=MERMAID_JS.as_uri()))
    budget = "--virtual-time-budget=20000"  # virtual time: the render's promises settle before the dump
    dumped = chromium(
        "--allow-file-access-from-files", budget, "--dump-dom", page.as_uri(), profile=folder / "p"
    )
    return Elements(dumped.stdout)


def bar_values(dom: Elements) -> list[float]:
    """The values Mermaid's bars stand at, read back through its y axis's tick labels."""
    ticks = [
        (float(text.text.replace(",", "")), float(text.attrs["transform"].split(",")[1].split(")")[0]))
        for text in dom.find("text", within="left-axis")
        if "label" in text.within
    ]
    (top_value, top_y), (bottom_value, bottom_y) = ticks[0], ticks[-1]
    per_pixel = (top_value - bottom_value) / (top_y - bottom_y)
    return [
        bottom_value + (float(bar.attrs["y"]) - bottom_y) * per_pixel
        for bar in dom.find("rect", within="bar-plot-0")
    ]


@pytest.mark.browser
@needs_chromium
@pytest.mark.skipif(
    not MERMAID_JS.is_file(),
    reason=f"no {MERMAID_JS.relative_to(REPO_ROOT)} (.ci/run fetches the npm package)",
)
def test_the_results_comments_chart_parses_and_renders_in_mermaid(tmp_path: Path) -> None:
    commits = [
        ("a" * 40, "base", []),
        ("b" * 40, "workers perf: x", ["C"]),
        ("c" * 40, "liger perf: y", ["D"]),
    ]
    results = synthetic_results(commits, {"sft": [1000, 1200, 1250], "dpo": [500, 510, 650]})
    blocks = mermaid_blocks(render_results(results))
    assert len(blocks) == 2
    for workload, source in zip(["sft", "dpo"], blocks, strict=True):
        dom = rendered_by_mermaid(source, tmp_path, workload)
        (status,) = [e.text for e in dom.find("pre") if e.attrs.get("id") == "status"]
        assert status == "rendered"
        # one bar per commit standing at its median on Mermaid's own axis, the interval's two lines, and the
        # commits' labels under the bars
        medians = [measurement(results, workload, sha).median for sha, _, _ in commits]
        drawn = bar_values(dom)
        assert len(drawn) == 3 and all(abs(d - m) < 0.005 * m for d, m in zip(drawn, medians, strict=True))
        assert len(dom.find("path", within="line-plot-1")) == len(dom.find("path", within="line-plot-2")) == 1
        assert [t.text for t in dom.find("text", within="bottom-axis")] == ["base", "C bbbbbbb", "D ccccccc"]
    # the bars-only chart a long comment falls back to parses too
    bars_only = rendered_by_mermaid(
        throughput_chart(results, "sft", intervals=False).source, tmp_path, "bars"
    )
    assert [e.text for e in bars_only.find("pre") if e.attrs.get("id") == "status"] == ["rendered"]
    assert len(bars_only.find("rect", within="bar-plot-0")) == 3 and not bars_only.find(
        "path", within="line-plot-1"
    )


@pytest.mark.browser
@needs_chromium
@pytest.mark.skipif(not MERMAID_JS.is_file(), reason=f"no {MERMAID_JS.relative_to(REPO_ROOT)}")
def test_mermaid_in_the_test_page_reports_a_chart_it_cannot_parse(tmp_path: Path) -> None:
    """The check above can fail: a chart Mermaid rejects leaves its error, not "rendered"."""
    dom = rendered_by_mermaid("xychart-beta\n    bar [1, 2\n", tmp_path, "broken")
    (status,) = [e.text for e in dom.find("pre") if e.attrs.get("id") == "status"]
    assert status.startswith("error: ")


def test_bot_report_draws_what_a_record_has_and_names_what_it_lacks(tmp_path: Path, capsys) -> None:
    """A record without step phases (a program the meter did not wrap): throughput and losses are drawn, the
    phases' absence is said per commit; --json says where the page went."""
    root = tmp_path / "target"
    make_repo(root, {"train.py": "print('train')\n"})
    commits = [("a" * 40, "base", []), ("b" * 40, "workers perf: x", ["C"])]
    record = synthetic_results(commits, {"sft": [1000, 1200]}).save(tmp_path / "record.json")
    out = tmp_path / "pages" / "report.html"
    assert main(["report", "--repo", str(root), "--results", str(record), "--out", str(out), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer == {
        "report": str(out),
        "results": str(record),
        "commits": [sha for sha, _, _ in commits],
        "workloads": ["sft"],
    }
    page = Elements(out.read_text())
    assert len(page.find("svg", "chart")) == 2 and not page.find("rect", "part")
    notes = [item.text for item in page.find("li")]
    assert "base: no step phases recorded" in notes and "C bbbbbbb: no step phases recorded" in notes
    numerics = [cell.text for cell in page.find("td") if "numerics" in cell.attrs.get("class", "")]
    assert numerics == ["unknown"]  # `workers` is no registered optimization: not guessed


def test_bot_report_refuses_bad_input_in_one_line(tmp_path: Path, capsys) -> None:
    root = tmp_path / "target"
    repo = make_repo(root, {"train.py": "print('train')\n"})
    (root / "train.py").write_text("print('faster')\n")
    commit_all(repo, "perf: faster")
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": "something else"}')
    for argv, says in [
        (["report", "HEAD~1..HEAD"], "no results file under"),
        (["report", "--results", str(broken)], "not a readable results file"),
        (["report", "HEAD~1..HEAD", "--results", str(broken)], "not allowed with argument"),
    ]:
        assert main([*argv, "--repo", str(root)]) == 2
        first, *usage = capsys.readouterr().err.strip().splitlines()
        assert first.startswith("bot: error: ") and says in first, first
        assert all(
            line.lstrip().startswith(("usage:", "[")) for line in usage
        )  # argparse's usage, nothing else
    assert not (root / ".bot" / "report.html").exists()
