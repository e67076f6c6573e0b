"""Trace formats: cgbench's own, Azure and Mooncake read natively (worked examples), format and
arrival-unit detection, gzip, windows, the column mapping, and every format error naming the file,
the line and the field."""

from __future__ import annotations

import gzip
from array import array
from pathlib import Path

import pytest

from cgbench.config.compose import load_config
from cgbench.config.schema import ConfigError, TraceColumnsConfig, TraceWindowConfig, WorkloadConfig
from cgbench.workload.arrivals import OrderedStream, RequestSpec
from cgbench.workload.stream import open_workload
from cgbench.workload.trace import TraceOptions, TraceSource, read_trace

INPUTS = Path(__file__).resolve().parents[1] / "inputs" / "traces"

AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         "2023-11-16 18:15:46.6805900,374,44\n"
         "2023-11-16 18:15:50.9951690,396,109\n"
         "2023-11-16 18:16:00.0000001,10,2\n")
MOONCAKE = ('{"timestamp": 0, "input_length": 1200, "output_length": 10, "hash_ids": [7, 8, 9]}\n'
            '{"timestamp": 250, "input_length": 700, "output_length": 3, "hash_ids": [7, 8]}\n'
            '{"timestamp": 1500, "input_length": 1100, "output_length": 4, "hash_ids": [7, 5, 9]}\n')
CGBENCH = "arrival_s,prompt_tokens,output_tokens\n0.5,10,2\n1.25,20,3\n"


def write(tmp_path: Path, name: str, text: str, *, gz: bool = False) -> Path:
    path = tmp_path / name
    data = text.encode()
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


# ---------------------------------------------------------------- worked examples


def test_azure_wall_clock_counts_from_the_first_timestamp(tmp_path):
    src = TraceSource(write(tmp_path, "az.csv", AZURE))
    # 50.9951690 - 46.6805900 = 4.3145790 s; 18:16:00.0000001 - 18:15:46.6805900 = 13.3194101 s (exact in ns)
    assert list(src.specs()) == [RequestSpec(0, 0.0, 374, 44), RequestSpec(1, 4.314579, 396, 109),
                                 RequestSpec(2, 13.3194101, 10, 2)]
    s = src.summary
    assert (s.format, s.format_how, s.arrival_unit) == ("azure", "detected from its header", "datetime")
    assert "wall-clock TIMESTAMP, counted from the first record's" in s.note
    assert (s.prompt_tokens, s.output_tokens, s.max_request_tokens) == (780, 155, 505)


def test_wall_clock_with_zones_bom_and_crlf(tmp_path):
    """A spreadsheet's byte-order mark and CRLF lines; ISO 'T', 'Z' and offsets (Azure's 2024 traces)."""
    text = ("\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\r\n2024-05-10 00:00:00.003000+00:00,10,2\r\n"
            "2024-05-10T00:00:01.5Z,10,2\r\n2024-05-10 02:00:02+02:00,1,1\r\n")
    assert [s.arrival_s for s in TraceSource(write(tmp_path, "az.csv", text)).specs()] == [0.0, 1.497, 1.997]


def test_mooncake_milliseconds_and_prefix_blocks(tmp_path):
    src = TraceSource(write(tmp_path, "mc.jsonl", MOONCAKE))
    specs = list(src.specs())
    assert [(s.arrival_s, s.prompt_tokens, s.output_tokens) for s in specs] == [(0.0, 1200, 10), (0.25, 700, 3),
                                                                               (1.5, 1100, 4)]
    assert [s.prefix_blocks for s in specs] == [array("q", [7, 8, 9]), array("q", [7, 8]), array("q", [7, 5, 9])]
    blocks = src.summary.to_json()["prefix_blocks"]
    # request 1 reuses its whole prompt (512 + 188 tokens); request 2 its first block only (block 5 is
    # new, so block 9 is no prefix hit though seen before)
    assert blocks == {"block_tokens": 512, "blocks": 8, "distinct_blocks": 4, "reused_prefix_tokens": 700 + 512,
                      "reused_prefix_share": 1212 / 3000}
    assert src.summary.arrival_unit == "ms"


def test_cgbench_format_is_read_as_recorded(tmp_path):
    for name in ("t.csv", "t.jsonl"):
        text = CGBENCH if name.endswith("csv") else (
            '{"arrival_s": 0.5, "prompt_tokens": 10, "output_tokens": 2}\n'
            '{"arrival_s": 1.25, "prompt_tokens": 20, "output_tokens": 3}\n')
        assert read_trace(write(tmp_path, name, text)) == [RequestSpec(0, 0.5, 10, 2), RequestSpec(1, 1.25, 20, 3)]


# ---------------------------------------------------------------- detection, gzip


def test_format_detected_or_named(tmp_path):
    path = write(tmp_path, "az.csv", AZURE)
    named = TraceSource(path, TraceOptions(format="azure"))
    assert named.summary.format_how == "workload.trace_format"
    assert list(named.specs()) == list(TraceSource(path).specs())
    with pytest.raises(ConfigError, match=r"az.csv:1: missing column 'timestamp' \(mooncake format"):
        TraceSource(path, TraceOptions(format="mooncake"))


@pytest.mark.parametrize("name", ["az.csv", "az.csv.gz"])
def test_gzip_is_told_by_its_magic_bytes(tmp_path, name):
    plain = list(TraceSource(write(tmp_path, "plain.csv", AZURE)).specs())
    assert list(TraceSource(write(tmp_path, name, AZURE, gz=True)).specs()) == plain


def test_shipped_copies_equal_the_originals():
    shared = Path("/work/shared/data/traces")
    if not shared.is_dir():
        pytest.skip("the original traces are not on this machine")
    root = Path(__file__).resolve().parents[2] / "examples" / "traces"
    assert gzip.decompress((root / "azure_conv_2023.csv.gz").read_bytes()) == \
        (shared / "azure_llm_inference_2023_conv.csv").read_bytes()
    assert gzip.decompress((root / "mooncake_conv_fast25.jsonl.gz").read_bytes()) == \
        (shared / "mooncake_fast25_conversation.jsonl").read_bytes()


# ---------------------------------------------------------------- units


def test_epoch_seconds_are_detected_and_counted_from_the_first(tmp_path):
    path = write(tmp_path, "e.csv", "arrival_s,prompt_tokens,output_tokens\n1700000000.5,10,2\n1700000002,20,3\n")
    src = TraceSource(path)
    assert [s.arrival_s for s in src.specs()] == [0.0, 1.5]
    assert (src.summary.arrival_unit, src.summary.unit_how) == ("epoch_s", "detected")
    assert "arrival_s in epoch seconds, counted from the first record's (detected)" in src.summary.note


def test_epoch_milliseconds_are_detected(tmp_path):
    path = write(tmp_path, "e.jsonl", '{"arrival_s": 1700000000000, "prompt_tokens": 1, "output_tokens": 1}\n'
                                      '{"arrival_s": 1700000000250, "prompt_tokens": 1, "output_tokens": 1}\n')
    src = TraceSource(path)
    assert src.summary.arrival_unit == "epoch_ms"
    assert [s.arrival_s for s in src.specs()] == [0.0, 0.25]


def test_unit_override_and_millisecond_columns(tmp_path):
    ms = "ts,in,out\n0,10,1\n200,10,1\n450,10,1\n700,10,1\n"
    path = write(tmp_path, "ms.csv", ms)
    cols = TraceColumnsConfig(arrival="ts", prompt="in", output="out")
    detected = TraceSource(path, TraceOptions(columns=cols))
    assert (detected.summary.arrival_unit, detected.summary.unit_how) == ("ms", "detected")
    assert [s.arrival_s for s in detected.specs()] == [0.0, 0.2, 0.45, 0.7]
    as_seconds = TraceSource(path, TraceOptions(columns=cols, arrival_unit="s"))
    assert [s.arrival_s for s in as_seconds.specs()] == [0.0, 200.0, 450.0, 700.0]
    own = write(tmp_path, "own.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,1\n200,1,1\n")
    assert [s.arrival_s for s in TraceSource(own, TraceOptions(arrival_unit="ms")).specs()] == [0.0, 0.2]


def test_a_fixed_unit_cannot_be_overridden(tmp_path):
    with pytest.raises(ConfigError, match="workload.trace_arrival_unit: 'ms' changes nothing: the azure format"):
        TraceSource(write(tmp_path, "az.csv", AZURE), TraceOptions(arrival_unit="ms"))


# ---------------------------------------------------------------- windows, mapping


def test_window_by_time_starts_at_its_start(tmp_path):
    path = write(tmp_path, "az.csv", AZURE)
    src = TraceSource(path, TraceOptions(window=TraceWindowConfig(start_s=4.0, end_s=13.0)))
    assert [(s.id, s.arrival_s, s.prompt_tokens) for s in src.specs()] == [(0, 4.314579 - 4.0, 396)]
    assert "workload.window start_s=4.0, end_s=13.0" in src.summary.note


def test_window_by_rows_starts_at_its_first_row(tmp_path):
    src = TraceSource(write(tmp_path, "mc.jsonl", MOONCAKE), TraceOptions(window=TraceWindowConfig(first=1, last=2)))
    assert [(s.id, s.arrival_s, s.prompt_tokens) for s in src.specs()] == [(0, 0.0, 700), (1, 1.25, 1100)]
    with pytest.raises(ConfigError, match="workload.window: .*the window holds no requests"):
        TraceSource(write(tmp_path, "mc.jsonl", MOONCAKE), TraceOptions(window=TraceWindowConfig(first=7)))


def test_window_and_time_scale_in_a_stream(tmp_path):
    w = WorkloadConfig(trace=str(write(tmp_path, "az.csv", AZURE)), time_scale=0.5,
                       window=TraceWindowConfig(end_s=10.0))
    stream, summary = open_workload(w, 0)
    assert isinstance(stream, OrderedStream) and stream.total == 2
    assert [s.arrival_s for s in stream.pop_due(100.0)] == [0.0, 4.314579 * 0.5]
    assert summary is not None and summary.span_s == pytest.approx(4.314579 * 0.5)


def test_column_mapping_with_hash_ids(tmp_path):
    text = "t,in,out,blocks\n0.0,600,5,1;2\n0.5,100,5,1\n"
    cols = TraceColumnsConfig(arrival="t", prompt="in", output="out", hash_ids="blocks", block_tokens=256)
    src = TraceSource(write(tmp_path, "x.csv", text), TraceOptions(columns=cols))
    specs = list(src.specs())
    assert [s.prefix_blocks for s in specs] == [array("q", [1, 2]), array("q", [1])]
    assert src.summary.format == "columns"
    assert src.summary.to_json()["prefix_blocks"]["reused_prefix_tokens"] == 100  # min(256, 100)


def test_a_trace_out_of_order_is_sorted(tmp_path):
    path = write(tmp_path, "t.csv", "arrival_s,prompt_tokens,output_tokens\n2,1,1\n1,2,1\n2,3,1\n")
    src = TraceSource(path)
    assert not src.in_order
    assert [(s.arrival_s, s.prompt_tokens) for s in src.specs()] == [(1.0, 2), (2.0, 1), (2.0, 3)]


def test_a_window_sees_a_late_row_of_an_unsorted_trace(tmp_path):
    """Reading stops at a window's end only once the trace is known to be in order."""
    path = write(tmp_path, "t.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,1\n5,2,1\n20,3,1\n3,4,1\n")
    src = TraceSource(path, TraceOptions(window=TraceWindowConfig(end_s=10.0)))
    assert [(s.arrival_s, s.prompt_tokens) for s in src.specs()] == [(0.0, 1), (3.0, 4), (5.0, 2)]
    assert src.summary.rows == 4 and src.summary.requests == 3


# ---------------------------------------------------------------- errors


@pytest.mark.slow
@pytest.mark.parametrize("name, message", [
    ("azure_bad_timestamp.csv", "azure_bad_timestamp.csv:3: TIMESTAMP: '2023-11-16 18:15' is not a date-time"),
    ("azure_missing_column.csv", "azure_missing_column.csv:1: missing column 'GeneratedTokens'"),
    ("azure_bad_tokens.csv", "azure_bad_tokens.csv:2: ContextTokens: 'abc' is not a positive integer"),
    ("azure_earlier_than_first.csv", "azure_earlier_than_first.csv:3: TIMESTAMP: '2023-11-16 18:15:46.0000000' is "
                                     "earlier than the first record's arrival"),
    ("mooncake_bad_hash_ids.jsonl", "mooncake_bad_hash_ids.jsonl:2: hash_ids: 'x' is not a list of integers"),
    ("mooncake_missing_output.jsonl", "mooncake_missing_output.jsonl:2: output_length: missing"),
    ("mooncake_bad_json.jsonl", "mooncake_bad_json.jsonl:2: invalid JSON"),
    ("mooncake_negative_timestamp.jsonl", "mooncake_negative_timestamp.jsonl:1: timestamp: -5 is not a "
                                          "non-negative number"),
    ("unknown_columns.csv", "unknown_columns.csv:1: missing column 'arrival_s' (header: when, tokens_in, "
                            "tokens_out; the formats cgbench reads: cgbench: arrival_s"),
    ("arrival_far_future.jsonl", "arrival_far_future.jsonl:1: arrival_s: 1e+308 is later than 1e+09 s after the start "
                                 "(an epoch time? subtract the first arrival"),
    ("damaged.csv.gz", "damaged.csv.gz: cannot read: a damaged gzip file"),
])
def test_every_format_error_names_file_line_and_field(name, message):
    with pytest.raises(ConfigError) as err:
        TraceSource(INPUTS / name)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_mapped_field_errors_name_the_mapped_column(tmp_path):
    cols = TraceColumnsConfig(arrival="t", prompt="in", output="out")
    with pytest.raises(ConfigError, match=r"x.csv:3: in: '-1' is not a positive integer"):
        TraceSource(write(tmp_path, "x.csv", "t,in,out\n0,1,1\n1,-1,1\n"), TraceOptions(columns=cols))
    with pytest.raises(ConfigError, match=r"x.csv:1: missing column 'out' \(columns format, workload.trace_columns"):
        TraceSource(write(tmp_path, "x.csv", "t,in\n0,1\n"), TraceOptions(columns=cols))


# ---------------------------------------------------------------- strict config


@pytest.mark.parametrize("overrides, message", [
    (["workload.trace_format=azure"], "workload.trace_format: not read with no workload.trace"),
    (["workload.window.end_s=10"], "workload.window.end_s: not read with no workload.trace"),
    (["workload=azure_conv", "workload.trace_columns={arrival: t, prompt: p, output: o}"],
     "workload.trace_columns: not read with workload.trace_format=azure (a native format"),
    (["workload=mooncake_conv", "workload.trace_arrival_unit=s"], "its arrivals are ms by definition"),
    (["workload=trace", "workload.trace_columns.arrival=t"], "workload.trace_columns.prompt: names the trace's field"),
    (["workload=trace", "workload.window.first=3", "workload.window.end_s=2"], "workload.window: a window is by time"),
    (["workload=trace", "workload.trace_format=azur"], "did you mean azure?"),
    (["workload=trace", "workload.trace_arrival_unit=hours"], "workload.trace_arrival_unit: 'hours' is not one of"),
])
def test_trace_keys_that_change_nothing_or_are_wrong_are_refused(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(overrides)
    assert message in str(err.value)


def test_presets_compose_with_their_engine_limits():
    azure = load_config(["workload=azure_conv"])
    assert (azure.workload.trace_format, azure.engine.max_sequence_length) == ("azure", 16384)
    moon = load_config(["workload=mooncake_conv", "engine.tp_size=4"])
    assert (moon.engine.max_sequence_length, moon.engine.chunked_prefill, moon.engine.tp_size) == (131072, True, 4)
    assert load_config(["workload=chat"]).engine.max_sequence_length == 2560
