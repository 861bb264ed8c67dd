"""PHP ``serialize()`` codecs side by side: ``laravel_bridge.php_serialize`` vs ``phpserialize``.

Usage::

    python bench/bench_php_serialize.py [--number N] [--repeat R] [--json out.json] [--profile]

Input: a real Laravel 8 queued job command — ``serialize($job)``, the bytes
Laravel stores in the queue payload's ``data.command`` — produced at start-up
by ``php bench/php/laravel_job_command.php`` (Debian's Laravel under
``/usr/share/php``). Without a working ``php`` the committed copy
``bench/php/laravel_job_command.bin`` (same script's output) is used, and the
output says so.

Scenarios, each timed with ``timeit`` (fixed ``--number`` calls per run, best
of ``--repeat`` runs, reported as calls per second):

1. ``decode``        — ``loads(data)``;
2. ``decode+encode`` — ``dumps(loads(data))``.

``phpserialize`` is called as ``loads(data, object_hook=phpobject)`` and
``dumps(obj)``. It keeps strings as ``bytes`` (no UTF-8 decode) while ours
decodes them to ``str``, so ours does strictly more work per string. It
cannot decode ``r:``/``R:``/``C:``/``E:``; if the command holds any of them the
benchmark runs on the largest subset both can decode (references unboxed,
shared objects copied, enums and ``Serializable`` data as strings) and the
output says so. The script also checks each codec's re-encoding for byte
identity with PHP's bytes and, with ``php`` present, whether PHP accepts
``phpserialize``'s float spellings.

``--profile`` adds a cProfile of our ``loads`` and ``dumps`` on the input.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import platform
import pstats
import shutil
import subprocess
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import phpserialize

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from laravel_bridge import php_serialize as ours  # noqa: E402

PHP_SCRIPT = HERE / "php" / "laravel_job_command.php"
PHP_BIN = HERE / "php" / "laravel_job_command.bin"
UNSUPPORTED_BY_PHPSERIALIZE = (b"r:", b"R:", b"C:", b"E:")


# -- input -------------------------------------------------------------------------------


def job_command() -> tuple[bytes, str]:
    """The serialized job and where it came from."""
    php = shutil.which("php")
    if php is None:
        return PHP_BIN.read_bytes(), f"{PHP_BIN.name} (committed copy: php not found)"
    try:
        proc = subprocess.run([php, str(PHP_SCRIPT)], capture_output=True, timeout=60, check=True)
    except (subprocess.SubprocessError, OSError) as exc:
        return PHP_BIN.read_bytes(), f"{PHP_BIN.name} (committed copy: php failed: {exc})"
    source = f"php {PHP_SCRIPT.relative_to(HERE.parent)}"
    if PHP_BIN.exists() and PHP_BIN.read_bytes() != proc.stdout:
        source += f" (NOTE: differs from committed {PHP_BIN.name})"
    return proc.stdout, source


def tag_counts(value: Any) -> dict[str, int]:
    """How many values of each PHP type the decoded tree holds (for the report)."""
    counts: dict[str, int] = {}
    seen: set[int] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        kind = type(v).__name__
        if isinstance(v, (ours.PhpObject, ours.PhpReference)):
            if id(v) in seen:
                counts["r/R back-ref"] = counts.get("r/R back-ref", 0) + 1
                continue
            seen.add(id(v))
        counts[kind] = counts.get(kind, 0) + 1
        if isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, ours.PhpObject):
            stack.extend(v.properties.values())
        elif isinstance(v, ours.PhpReference):
            stack.append(v.value)
    return dict(sorted(counts.items()))


def strip_unsupported(value: Any) -> Any:
    """A copy phpserialize can decode once dumped: no r:/R:/C:/E: (the input is shallow)."""
    if isinstance(value, ours.PhpReference):
        return strip_unsupported(value.value)
    if isinstance(value, ours.PhpEnum):
        return f"{value.class_name}:{value.case}"
    if isinstance(value, ours.PhpSerializable):
        return value.data
    if isinstance(value, list):
        return [strip_unsupported(v) for v in value]
    if isinstance(value, dict):
        return {k: strip_unsupported(v) for k, v in value.items()}
    if isinstance(value, ours.PhpObject):  # a fresh object each time: no r: on re-encode
        props = {k: strip_unsupported(v) for k, v in value.properties.items()}
        return ours.PhpObject(value.class_name, props)
    return value


# -- correctness checks ------------------------------------------------------------------


def first_difference(got: bytes, want: bytes) -> str:
    for i, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            lo, hi = max(0, i - 12), i + 12
            return f"offset {i}: got {got[lo:hi]!r}, PHP {want[lo:hi]!r}"
    return f"lengths {len(got)} vs {len(want)}"


def php_roundtrip(inputs: list[bytes]) -> list[str] | None:
    """PHP's ``serialize(unserialize(x))`` for each input ("REJECTED" if it fails)."""
    php = shutil.which("php")
    if php is None:
        return None
    code = (
        "$in = json_decode(stream_get_contents(STDIN));"
        "$out = [];"
        "foreach ($in as $b) { $v = @unserialize(base64_decode($b));"
        ' $out[] = ($v === false) ? "REJECTED" : serialize($v); }'
        "echo json_encode($out);"
    )
    import base64

    payload = json.dumps([base64.b64encode(b).decode() for b in inputs])
    try:
        proc = subprocess.run(
            [php, "-r", code], input=payload.encode(), capture_output=True, timeout=60, check=True
        )
        result: list[str] = json.loads(proc.stdout)
    except (subprocess.SubprocessError, OSError, ValueError):
        return None
    return result


def identity_report(data: bytes, decoded_theirs: Any) -> dict[str, Any]:
    report: dict[str, Any] = {}
    ours_out = ours.dumps(ours.loads(data))
    report["ours_byte_identical"] = ours_out == data
    if ours_out != data:
        report["ours_first_difference"] = first_difference(ours_out, data)
    theirs_out = phpserialize.dumps(decoded_theirs)
    report["phpserialize_byte_identical"] = theirs_out == data
    if theirs_out != data:
        report["phpserialize_first_difference"] = first_difference(theirs_out, data)
        report["phpserialize_length"] = len(theirs_out)
    floats = [499.0, 0.0, -0.0, 1e15, 1e17, 1e-7, 1e100, float("inf"), float("-inf"), float("nan")]
    spelled = [phpserialize.dumps(f) for f in floats]
    back = php_roundtrip([theirs_out, *spelled])
    rows = []
    for i, (f, s) in enumerate(zip(floats, spelled, strict=True)):
        row = {"float": repr(f), "phpserialize": s.decode(), "ours": ours.dumps(f).decode()}
        if back is not None:
            row["php_reads_phpserialize_as"] = back[i + 1]
        rows.append(row)
    report["floats"] = rows
    if back is not None:
        report["php_reserializes_phpserialize_output_to_original"] = back[0].encode() == data
    return report


# -- timing ------------------------------------------------------------------------------


def best_rate(fn: Callable[[], Any], number: int, repeat: int) -> float:
    fn()  # warm-up (and fail fast)
    return number / min(timeit.Timer(fn).repeat(repeat=repeat, number=number))


def run_benchmarks(data: bytes, number: int, repeat: int) -> dict[str, dict[str, float]]:
    def ours_decode() -> Any:
        return ours.loads(data)

    def ours_roundtrip() -> bytes:
        return ours.dumps(ours.loads(data))

    def theirs_decode() -> Any:
        return phpserialize.loads(data, object_hook=phpserialize.phpobject)

    def theirs_roundtrip() -> bytes:
        return phpserialize.dumps(phpserialize.loads(data, object_hook=phpserialize.phpobject))

    return {
        "decode": {
            "ours": best_rate(ours_decode, number, repeat),
            "phpserialize": best_rate(theirs_decode, number, repeat),
        },
        "decode+encode": {
            "ours": best_rate(ours_roundtrip, number, repeat),
            "phpserialize": best_rate(theirs_roundtrip, number, repeat),
        },
    }


def print_table(title: str, size: int, results: dict[str, dict[str, float]]) -> None:
    print(f"\n{title} ({size} bytes)")
    print(f"  {'scenario':<15}{'ours ops/s':>14}{'phpserialize':>15}{'ours/theirs':>13}  target")
    for scenario, r in results.items():
        ratio = r["ours"] / r["phpserialize"]
        verdict = "2x met" if ratio >= 2 else ">=1x met" if ratio >= 1 else "MISSED"
        rates = f"{r['ours']:>14,.0f}{r['phpserialize']:>15,.0f}"
        print(f"  {scenario:<15}{rates}{ratio:>12.2f}x  {verdict}")


# -- profile -----------------------------------------------------------------------------


def profile(label: str, fn: Callable[[], Any], calls: int, top: int = 12) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("tottime").print_stats(top)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    return f"\n== cProfile: {label}, {calls} calls, sorted by tottime ==\n" + "\n".join(lines[2:])


# -- main --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--number", type=int, default=2000, help="calls per timed run")
    ap.add_argument("--repeat", type=int, default=7, help="timed runs; the best counts")
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON here")
    ap.add_argument("--profile", action="store_true", help="cProfile our loads and dumps")
    args = ap.parse_args(argv)
    started = time.perf_counter()

    data, source = job_command()
    print(f"input: {len(data)} bytes from {source}")
    decoded = ours.loads(data)
    counts = tag_counts(decoded)
    print("types in the command:", ", ".join(f"{k}={v}" for k, v in counts.items()))

    out: dict[str, Any] = {
        "python": platform.python_version(),
        "phpserialize": getattr(phpserialize, "__version__", "?"),
        "input_source": source,
        "input_bytes": len(data),
        "type_counts": counts,
        "number": args.number,
        "repeat": args.repeat,
    }

    bench_data = data
    try:
        theirs_decoded = phpserialize.loads(data, object_hook=phpserialize.phpobject)
        print("phpserialize decodes the real command (it holds no r:/R:/C:/E:)")
        out["phpserialize_decodes_input"] = True
    except Exception as exc:  # phpserialize raises ValueError, and worse on odd input
        present = [t.decode() for t in UNSUPPORTED_BY_PHPSERIALIZE if t in data]
        print(f"phpserialize FAILS on the real command ({type(exc).__name__}: {exc});")
        print(f"  tags it lacks that may be present: {present}; using the largest common subset")
        out["phpserialize_decodes_input"] = False
        out["phpserialize_error"] = f"{type(exc).__name__}: {exc}"
        bench_data = ours.dumps(strip_unsupported(decoded))
        theirs_decoded = phpserialize.loads(bench_data, object_hook=phpserialize.phpobject)

    ident = identity_report(bench_data, theirs_decoded)
    out["identity"] = ident
    print(f"ours: dumps(loads(x)) == PHP bytes: {ident['ours_byte_identical']}")
    print(
        f"phpserialize: dumps(loads(x)) == PHP bytes: {ident['phpserialize_byte_identical']}",
        end="",
    )
    if not ident["phpserialize_byte_identical"]:
        print(f" ({ident['phpserialize_length']} vs {len(bench_data)} bytes; first difference at")
        print(f"  {ident['phpserialize_first_difference']})", end="")
    print()
    if "php_reserializes_phpserialize_output_to_original" in ident:
        ok = ident["php_reserializes_phpserialize_output_to_original"]
        print(f"  PHP unserialize+serialize of phpserialize's output == original: {ok}")
    print(
        "  float spellings (phpserialize | ours=PHP serialize | PHP unserialize of phpserialize's):"
    )
    for row in ident["floats"]:
        php_view = row.get("php_reads_phpserialize_as", "(php n/a)")
        print(f"    {row['float']:>18}: {row['phpserialize']:<24} {row['ours']:<20} {php_view}")

    results = run_benchmarks(bench_data, args.number, args.repeat)
    title = "Laravel job command" if bench_data is data else "Laravel job command, common subset"
    print_table(title, len(bench_data), results)
    out["results"] = {s: {**r, "ratio": r["ours"] / r["phpserialize"]} for s, r in results.items()}
    print(f"  best of {args.repeat} x {args.number} calls; python {platform.python_version()}")

    if args.profile:
        print(profile("ours.loads", lambda: ours.loads(data), 2000))
        print(profile("ours.dumps", lambda: ours.dumps(decoded), 4000))

    out["wall_seconds"] = time.perf_counter() - started
    print(f"total {out['wall_seconds']:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
