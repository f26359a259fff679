"""verify report writes only where --out says: without --out it is a usage error (exit 2, one line) and writes
nothing into the current directory."""
import subprocess
import sys


def test_report_without_out_writes_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pathmdn_verify", "report", "--device", "cpu"], capture_output=True,
                          text=True, cwd=tmp_path)
    assert proc.returncode == 2 and "--out" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
