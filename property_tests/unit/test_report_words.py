"""In verify/report and its command, "record" is only an op's declarative record: a point's result is a
measurement (no variable named rec, recs or records)."""
import io
import tokenize
from pathlib import Path

from pathmdn_verify.commands import report as command
from pathmdn_verify.report import document


def test_a_point_result_is_a_measurement_not_a_record():
    files = sorted(Path(document.__file__).parent.glob("*.py")) + [Path(command.__file__)]
    found = []
    for src in files:
        for tok in tokenize.generate_tokens(io.StringIO(src.read_text()).readline):
            if tok.type == tokenize.NAME and tok.string in ("rec", "recs", "records", "rec_"):
                found.append(f"{src.name}:{tok.start[0]}: {tok.string}")
    assert not found, found
