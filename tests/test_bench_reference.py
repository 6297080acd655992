"""The pages generated from the records: RESULTS.md and the optimizations' effects tables are fresh, and a
stale one is found."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from benchmarks import reference
from benchmarks.records import RESULTS_FOLDER, Spread, load_records
from benchmarks.reference import (
    EFFECTS_END,
    EFFECTS_START,
    GENERATED,
    OPTIMIZATIONS,
    RESULTS_PAGE,
    format_number,
    format_spread,
    generated_files,
    heading_anchors,
    stale_files,
)


def _copy_results(tmp_path: Path) -> tuple[Path, Path]:
    results = tmp_path / "results"
    shutil.copytree(RESULTS_FOLDER, results)
    page = tmp_path / "RESULTS.md"
    shutil.copyfile(RESULTS_PAGE, page)
    return results, page


def test_the_generated_files_are_fresh():
    stale = stale_files(generated_files(RESULTS_FOLDER, RESULTS_PAGE, OPTIMIZATIONS))
    assert not stale, f"stale: {stale}; run python -m benchmarks.reference"


def test_results_page_says_it_is_generated_and_links_the_journal():
    text = RESULTS_PAGE.read_text(encoding="utf-8")
    assert text.startswith(GENERATED)
    assert "(results/journal.md)" in text


def test_a_changed_record_makes_the_page_stale(tmp_path, capsys):
    results, page = _copy_results(tmp_path)
    empty = tmp_path / "optimizations"
    empty.mkdir()
    argv = ["--check", "--results", str(results), "--page", str(page), "--optimizations", str(empty)]
    assert reference.main(argv) == 0
    path = sorted(results.glob("*.json"))[0]
    data = json.loads(path.read_text(encoding="utf-8"))
    data["median"] = data["median"] * 2
    path.write_text(json.dumps(data), encoding="utf-8")
    assert reference.main(argv) == 1
    assert f"stale: {page}" in capsys.readouterr().err
    assert reference.main(argv[1:]) == 0  # writes it
    assert reference.main(argv) == 0


def test_effects_go_between_the_markers_of_an_optimization_s_readme(tmp_path, capsys):
    results, page = _copy_results(tmp_path)
    root = tmp_path / "optimizations"
    for name, body in (
        ("packing", f"# packing\n\n## Effects\n\n{EFFECTS_START}\nold table\n{EFFECTS_END}\n\nMore text.\n"),
        ("fa2", "# fa2\n\nNo markers here.\n"),
        ("not_measured", f"# not measured\n\n{EFFECTS_START}\n{EFFECTS_END}\n"),
    ):
        (root / name).mkdir(parents=True)
        (root / name / "README.md").write_text(body, encoding="utf-8")
    argv = ["--results", str(results), "--page", str(page), "--optimizations", str(root)]
    assert reference.main(["--check", *argv]) == 1
    assert f"stale: {root / 'packing' / 'README.md'}" in capsys.readouterr().err
    assert reference.main(argv) == 0
    packing = (root / "packing" / "README.md").read_text(encoding="utf-8")
    before, _, rest = packing.partition(EFFECTS_START)
    table, _, after = rest.partition(EFFECTS_END)
    assert before == "# packing\n\n## Effects\n\n" and after == "\n\nMore text.\n"
    assert "old table" not in table and "| packing `9675201`" in table
    assert table.count("\n| 20") == sum("packing" in r.optimizations for r in load_records(results))
    assert (root / "fa2" / "README.md").read_text(encoding="utf-8") == "# fa2\n\nNo markers here.\n"
    assert "No measurement of this optimization's effect" in (root / "not_measured" / "README.md").read_text()
    assert reference.main(["--check", *argv]) == 0


def test_numbers_and_spreads_read_as_the_journal_writes_them():
    assert [format_number(v) for v in (36879, 8.53e-2, 0.0088, 113311.0, 2310.6, -5.9)] == [
        "36,879",
        "0.0853",
        "0.0088",
        "113,311",
        "2,310.6",
        "-5.9",
    ]
    assert format_spread(Spread("min-max", low=4533, high=9875)) == "4,533–9,875"
    assert format_spread(Spread("interval", low=-7.5, high=-4.4, level=0.95)) == "[-7.5, -4.4] (95%)"
    assert format_spread(Spread("runs", values=(5447, 6086))) == "5,447, 6,086"
    assert format_spread(None) == "–"


def test_headings_get_github_s_anchors():
    anchors = heading_anchors("# A (b), `c` ×2\n\n## Same\n\n### Same\n")
    assert anchors == {"A (b), `c` ×2": "a-b-c-2", "Same": "same"}
