"""benchmarks/lib.sh, which the table scripts (interleaved.sh, hrt.sh, spec.sh, royalflush.sh) share: a row
made with other settings is refused rather than resumed or reused, an average is whole or absent, a failing
table script leaves the last good table, every background row ends before a failure stops the script, and the
scripts refuse to run outside the repository root. fastmt-average is stood in for by a stub: no model trains."""

import subprocess
import textwrap

from conftest import REPO

# `$PY -m fastmt.checkpoint_average --workdir RUN --last 5 --output OUT`: OUT made with one file, or a failure
# after a partial OUT when RUN holds a file named fail (a kill or an error midway).
STUB_PY = textwrap.dedent('''\
    #!/usr/bin/env bash
    out=${@: -1}
    mkdir -p "$out"; echo averaged > "$out/checkpoint"
    if [[ -f $4/fail ]]; then exit 1; fi
    ''')


def _bash(script: str, tmp_path, cwd=REPO):
  stub = tmp_path / 'stub_py'
  stub.write_text(STUB_PY)
  stub.chmod(0o755)
  prelude = f'set -euo pipefail\nPY={stub}\nsource {REPO / "benchmarks" / "lib.sh"}\ncd {tmp_path}\n'
  return subprocess.run(['bash', '-c', prelude + textwrap.dedent(script)], capture_output=True, text=True, cwd=cwd,
                        timeout=60)


def test_a_row_made_with_other_settings_is_refused_not_resumed_or_reused(tmp_path):
  done = _bash('''
      claim_row run "steps=800"
      if row_done run "steps=800"; then echo "finished too early"; fi
      average_row run
      row_done run "steps=800"
      ''', tmp_path)
  assert done.returncode == 0, done.stderr
  assert 'finished too early' not in done.stdout and 'run_avg5: done' in done.stdout
  assert (tmp_path / 'run_avg5' / 'row.txt').read_text() == 'steps=800\n'
  assert not (tmp_path / 'run_avg5.tmp').exists()
  for call in ('row_done run "steps=400"', 'claim_row run "steps=400"'):  # the average, or the run it came from
    refused = _bash(call + '\necho went on', tmp_path)
    assert refused.returncode == 2 and 'went on' not in refused.stdout, refused.stdout
    assert 'made with other settings' in refused.stderr and 'then: steps=800' in refused.stderr
    assert 'now:  steps=400' in refused.stderr
  # an average from before rows recorded their settings: reused as it was
  (tmp_path / 'run_avg5' / 'row.txt').unlink()
  old = _bash('row_done run "steps=400" && echo reused', tmp_path)
  assert old.returncode == 0 and 'reused' in old.stdout and 'before rows recorded' in old.stdout


def test_an_average_is_whole_or_absent_and_a_failed_table_keeps_the_last_good_one(tmp_path):
  (tmp_path / 'run').mkdir()
  (tmp_path / 'run' / 'row.txt').write_text('steps=800\n')
  assert _bash('average_row run', tmp_path).returncode == 0
  (tmp_path / 'run' / 'fail').write_text('')
  failed = _bash('average_row run', tmp_path)  # made again (royalflush's teacher): it fails midway
  assert failed.returncode == 1
  assert (tmp_path / 'run_avg5' / 'row.txt').exists()  # the whole earlier average stays, not half a new one
  table = tmp_path / 'table.md'
  table.write_text('| the last good table |\n')
  broken = _bash('write_table table.md python3 -c "print(\'| half |\'); raise SystemExit(1)"', tmp_path)
  assert broken.returncode == 1 and table.read_text() == '| the last good table |\n'
  good = _bash('write_table table.md echo "| new |"', tmp_path)
  assert good.returncode == 0 and table.read_text() == '| new |\n' and '| new |' in good.stdout


def test_every_background_row_ends_before_a_failure_stops_the_script(tmp_path):
  result = _bash('''
      (exit 3) & first=$!
      (sleep 1; touch slow_row_finished) & second=$!
      if wait_all "$first" "$second"; then echo "no failure seen"; fi
      ''', tmp_path)
  assert result.returncode == 0 and 'no failure seen' not in result.stdout, result.stderr
  assert (tmp_path / 'slow_row_finished').exists()


def test_the_scripts_refuse_to_run_outside_the_repository_root(tmp_path):
  result = subprocess.run(['bash', str(REPO / 'benchmarks' / 'hrt.sh')], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
  assert result.returncode == 2 and 'run it from the repository root' in result.stderr, result.stderr
  assert list(tmp_path.iterdir()) == []  # before its mkdir -p of RUNS in the wrong place
