"""The Megatron step-log reader (cgbench.workload.megatron_log).

The lines are written here from the pinned pieces (tests/data/megatron_log_format.json) with
Python's own ``%`` formatting, as Megatron writes them: an oracle independent of the writer the
reader shares its pieces with."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgbench.errors import ConfigError
from cgbench.workload import megatron_log_format as fmt
from cgbench.workload.megatron_log import MegatronLogReader, read_all
from tests.helpers import examples

PINNED = json.loads((Path(__file__).resolve().parents[1] / "data" / "megatron_log_format.json").read_text())
PIECES = {p["format"]: p["pieces"] for p in PINNED["refs"].values()}


def megatron_line(version: str, *, rank=0, step=1, clock="12:34:56", ms=23.456, kind="non-decode",
                  real=(300, 1, 12), graph=(512, 1, 16), reqs=(13, 256, 0, 4, 100, 0), blocks=(120, 2000, 0, 100),
                  mem=(1234, 40.1, 42.0), spec=None, color=False) -> str:
    """One step line as Megatron's code builds it: the pinned printf strings, ``%``-formatted."""
    p = {k: fmt.printf_form(v) for k, v in PIECES[version].items()}

    def shape(s):
        return p["shape"] % s if s is not None else p["graph_off"]

    config = p["config"] % (kind, shape(real), shape(graph))
    if version == fmt.V019:
        block_values = blocks
    else:  # occupied/usable, allocatable, active-used, paused-used/budget
        block_values = (blocks[0] + blocks[2], blocks[1] + blocks[3], 7, blocks[0], blocks[2], blocks[3])
    line = ((p["head"] + p["reqs"] + p["blocks"] + p["mem"])
            % (rank, step, clock, ms, config, *reqs, *block_values, *mem))
    if spec is not None:
        accepted, proposed, steps = spec
        per = ", ".join(p["spec_position"] % (i + 1, 50.0) for i in range(2))
        line += p["spec"] % (100.0 * accepted / proposed, accepted, proposed, steps, per)
    return "\x1b[94m" + line + "\x1b[0m" if color else line


def write(tmp_path: Path, lines: list[str], name: str = "run.log", *, end: str = "\n") -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines[:-1]) + (lines[-1] + end if lines else ""))
    return path


@pytest.mark.parametrize("version", fmt.VERSIONS)
def test_the_issue_line_reads_field_by_field(tmp_path, version):
    """The example of the issue: every field as Megatron wrote it."""
    _, (s,) = read_all(write(tmp_path, [megatron_line(version, step=123)]))
    assert (s.rank, s.step, s.clock, s.ms, s.kind, s.previous) == (0, 123, "12:34:56", 23.456, "non-decode", None)
    assert (s.real, s.graph) == ((300, 1, 12), (512, 1, 16))
    assert (s.active, s.max_requests, s.paused, s.waiting, s.finished, s.evicted) == (13, 256, 0, 4, 100, 0)
    assert (s.active_used, s.paused_used, s.paused_budget) == (120, 0, 100)
    assert s.pool_blocks == (2000 if version == fmt.V019 else 2100)
    assert s.version == version and not s.eager and s.spec is None


@pytest.mark.parametrize("version", fmt.VERSIONS)
def test_eager_decode_colored_prefixed_and_speculative_lines(tmp_path, version):
    lines = [
        "INFO:root:" + megatron_line(version, step=1, kind="decode", real=(64, 0, 64), graph=None, color=True),
        "[2026-01-01 00:00:00] " + megatron_line(version, step=2, kind="decode (prev: non-decode)",
                                                 real=(5, 0, 5), graph=(8, 0, 8), spec=(30, 40, 10)),
    ]
    _, (a, b) = read_all(write(tmp_path, lines))
    assert a.eager and a.graph is None and a.real == (64, 0, 64) and a.kind == "decode"
    assert (b.kind, b.previous, b.spec) == ("decode", "non-decode", (30, 40, 10))


shapes = st.tuples(st.integers(0, 99_999), st.integers(0, 4096), st.integers(0, 4096))


@given(version=st.sampled_from(fmt.VERSIONS), rank=st.integers(0, 4095), step=st.integers(0, 10**9),
       ms=st.floats(0, 1e6, allow_nan=False).map(lambda x: round(x, 3)), real=shapes,
       graph=st.none() | shapes, reqs=st.tuples(*[st.integers(0, 10**6)] * 6),
       blocks=st.tuples(*[st.integers(0, 10**7)] * 4), color=st.booleans())
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_line_megatron_writes_reads_back(tmp_path_factory, version, rank, step, ms, real, graph, reqs, blocks,
                                             color):
    path = write(tmp_path_factory.mktemp("log"), [megatron_line(version, rank=rank, step=step, ms=ms, real=real,
                                                                graph=graph, reqs=reqs, blocks=blocks, color=color)])
    _, (s,) = read_all(path)
    assert (s.rank, s.step, s.real, s.graph, s.ms) == (rank, step, real, graph, float(f"{ms:.3f}"))
    assert (s.active, s.max_requests, s.paused, s.waiting, s.finished, s.evicted) == reqs
    assert (s.active_used, s.paused_used) == (blocks[0], blocks[2])


def test_the_writer_writes_what_megatron_writes():
    """cgbench's writer (run --emit-megatron-log) and the %-formatted pinned pieces agree to the byte."""
    for version in fmt.VERSIONS:
        v = fmt.LineValues(rank=3, step=9, clock="01:02:03", ms=12.3456, kind="non-decode", real=(300, 1, 12),
                           graph=None, active=13, max_requests=256, paused=0, waiting=4, finished=100, evicted=0,
                           active_used=120, active_total=2000, paused_used=0, paused_total=100, allocatable=7)
        assert fmt.format_line(v, version) == megatron_line(version, rank=3, step=9, clock="01:02:03", ms=12.3456,
                                                            graph=None, mem=(0, 0.0, 0.0))


def test_other_lines_are_skipped_and_counted(tmp_path):
    lines = ["some banner", megatron_line(fmt.V019, step=1), "> dynamic_engine.py: building cuda graphs for ",
             "[512]: 1 P + 16 D", megatron_line(fmt.V019, step=2), "Traceback? no, just text with * rank in it"]
    reader, steps = read_all(write(tmp_path, lines))
    s = reader.stats
    assert [x.step for x in steps] == [1, 2]
    assert (s.lines, s.step_lines, s.other_lines, s.malformed) == (6, 2, 3, 1)
    assert s.malformed_examples[0][0] == 6


def test_a_cut_off_last_line_is_told_apart(tmp_path):
    cut = megatron_line(fmt.V019, step=2)[:70]
    reader, steps = read_all(write(tmp_path, [megatron_line(fmt.V019, step=1), cut], end=""))
    assert len(steps) == 1 and reader.stats.truncated_last and reader.stats.malformed == 0
    # a complete last line without its newline is a step line
    reader, steps = read_all(write(tmp_path, [megatron_line(fmt.V019, step=1), megatron_line(fmt.V019, step=2)],
                                   end=""))
    assert len(steps) == 2 and not reader.stats.truncated_last


def test_crlf_line_endings(tmp_path):
    path = tmp_path / "crlf.log"
    path.write_bytes((megatron_line(fmt.MAIN, step=4) + "\r\n").encode())
    _, (s,) = read_all(path)
    assert s.step == 4


def test_gzip_by_its_magic_bytes_whatever_its_name(tmp_path):
    text = "\n".join(megatron_line(fmt.V019, step=i) for i in range(1, 6)) + "\n"
    path = tmp_path / "plain_name.log"
    path.write_bytes(gzip.compress(text.encode()))
    reader, steps = read_all(path)
    assert [s.step for s in steps] == [1, 2, 3, 4, 5] and reader.stats.gzip


def test_ranks_are_kept_apart(tmp_path):
    lines = []
    for step in range(1, 5):
        for rank in (0, 1):
            lines.append(megatron_line(fmt.V019, rank=rank, step=step, graph=None if rank else (512, 1, 16)))
    reader, steps = read_all(write(tmp_path, lines))
    assert sorted(reader.ranks) == [0, 1]
    assert all(r.lines == 4 and r.interval == 1 and r.restarts == 0 for r in reader.ranks.values())
    assert sum(s.eager for s in steps if s.rank == 1) == 4 and not any(s.eager for s in steps if s.rank == 0)


def test_sampled_irregular_and_restarted_numbering(tmp_path):
    sampled = [megatron_line(fmt.V019, step=s) for s in (4, 8, 12, 16)]
    reader, _ = read_all(write(tmp_path, sampled, "sampled.log"))
    assert reader.ranks[0].interval == 4
    assert "one step in 4 logged" in reader.sampling()[0]
    irregular = [megatron_line(fmt.V019, step=s) for s in (1, 2, 5, 6)]
    reader, _ = read_all(write(tmp_path, irregular, "irregular.log"))
    assert reader.ranks[0].interval is None and "irregular" in reader.sampling()[0]
    restarted = [megatron_line(fmt.V019, step=s) for s in (1, 2, 3, 1, 2)]
    reader, _ = read_all(write(tmp_path, restarted, "restarted.log"))
    assert reader.ranks[0].restarts == 1 and reader.ranks[0].interval == 1


def test_capture_listing_arguments_and_emitted_header(tmp_path):
    graphs = [(512, 1, 16), (256, 0, 256), (16, 0, 16)]
    lines = ["------------------------ arguments ------------------------",
             "  hidden_size ..................................... 4096",
             "  a_name_that_is_far_longer_than_forty_eight_characters_ok  True",
             "-------------------- end of arguments ---------------------",
             "  not_an_argument ........ outside the block",
             *[fmt.capture_line(i, len(graphs), g) for i, g in enumerate(graphs, 1)],
             # a second rank's listing, the same graphs: no conflict
             *[fmt.capture_line(i, len(graphs), g) for i, g in enumerate(graphs, 1)],
             "cgbench: emitted log: model=hybrid grid=megatron graphs=3",
             megatron_line(fmt.V019)]
    reader, _ = read_all(write(tmp_path, lines))
    assert reader.capture.graphs == graphs and reader.capture.complete
    assert (reader.capture.listings, reader.capture.conflicts) == (2, 0)
    assert reader.arguments == {"hidden_size": "4096",
                                "a_name_that_is_far_longer_than_forty_eight_characters_ok": "True"}
    assert reader.emitted == {"model": "hybrid", "grid": "megatron", "graphs": "3"}


def test_a_file_with_no_step_line_is_one_error(tmp_path):
    with pytest.raises(ConfigError, match="no step line.*an empty file"):
        read_all(write(tmp_path, [], "empty.log"))
    with pytest.raises(ConfigError, match="2 line.*--inference-logging-step-interval"):
        read_all(write(tmp_path, ["hello", "world"], "text.log"))
    broken = megatron_line(fmt.V019).replace("reqs: a", "reqs: b")
    with pytest.raises(ConfigError, match="1 line.*start like one but do not parse, the first at line 2"):
        read_all(write(tmp_path, ["hello", broken, "bye"], "broken.log"))


def test_unreadable_inputs(tmp_path):
    with pytest.raises(ConfigError, match="--megatron-log: .*no such file"):
        read_all(tmp_path / "missing.log")
    with pytest.raises(ConfigError, match="a regular file"):
        read_all(tmp_path)
    bad = tmp_path / "latin1.log"
    bad.write_bytes(b"\xff\xfe not utf-8\n")
    with pytest.raises(ConfigError, match="not a UTF-8 text file"):
        read_all(bad)
    damaged = tmp_path / "damaged.log.gz"
    damaged.write_bytes(gzip.compress(((megatron_line(fmt.V019) + "\n") * 50).encode())[:40])
    with pytest.raises(ConfigError, match="damaged gzip"):
        read_all(damaged)


def test_progress_is_called_with_bytes_and_size(tmp_path):
    lines = [megatron_line(fmt.V019, step=i) for i in range(1, 4)]
    path = write(tmp_path, lines)
    calls = []
    reader = MegatronLogReader(path, progress=lambda done, total: calls.append((done, total)))
    list(reader.steps())
    assert calls[-1] == (path.stat().st_size, path.stat().st_size)


def test_a_time_that_is_not_finite_is_malformed(tmp_path):
    bad = megatron_line(fmt.V019).replace("time: 23.456 ms", "time: nan ms")
    reader, steps = read_all(write(tmp_path, [bad, megatron_line(fmt.V019, step=2)]))
    assert [s.step for s in steps] == [2] and reader.stats.malformed == 1


def test_too_many_ranks_is_not_one_runs_log(tmp_path, monkeypatch):
    from cgbench.workload import megatron_log

    monkeypatch.setattr(megatron_log, "MAX_RANKS", 2)
    with pytest.raises(ConfigError, match="more than 2 ranks"):
        read_all(write(tmp_path, [megatron_line(fmt.V019, rank=r) for r in range(3)]))


@pytest.mark.slow  # simulates the run whose lines the benchmark repeats
def test_the_benchmarks_log_is_what_it_says(tmp_path):
    from tests.helpers import load_script

    bench = load_script("bench_megatron_log")
    path = tmp_path / "bench.log.gz"
    bench.write_log(path, 1200, 5, True)
    reader, steps = read_all(path)
    assert reader.stats.lines == 1200 and reader.stats.step_lines == 1000 and reader.stats.other_lines == 200
    assert [s.step for s in steps] == list(range(1, 1001)) and reader.ranks[0].interval == 1
    assert sum(s.eager for s in steps[:875]) == 15  # the hybrid run's 875 steps (15 eager), then again
