"""Bad input to the secondary tools (fastmt-bench, -distill, -clusters, -export-split, the work directory
records): a clear FastmtError before any work, never a traceback, a loop that never ends or a file erased."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys

import ml_collections
import pytest

from conftest import REPO
from fastmt import bench, cli, clusters_lib, distill, export_split, workdir as workdir_lib
from fastmt.errors import FastmtError, MissingError


@pytest.mark.parametrize('method, message', [
    ('pgj:b3', 'must be integers'),
    ('beam:', 'must be integers'),
    ('greedy:4', 'greedy takes at most 0 numbers'),
    ('pgj:3:2', 'pgj takes at most 1 number after it'),
    ('hgj:3:16:2', 'hgj takes at most 2 numbers'),
    ('beam:4+ngram', 'unknown suffix \\+ngram for beam \\(it takes none\\)'),
    ('pgj:3+ngram', "unknown suffix \\+ngram for pgj: use one of \\['\\+bigram', '\\+pad'\\]"),
    ('ib+dedupx', '\\+dedupN takes an integer'),
    ('spec:-2+ngram', 'must not be negative'),
    ('spec:3+ngramx', "unknown suffix \\+ngramx for spec"),
    ('spec:3+pad64', "unknown suffix \\+pad64 for spec"),
    ('spec:3+ngram+poolx', 'unknown suffix \\+poolx \\(the last suffix of two must be \\+pool'),
    ('spec:3+pool3', 'unknown suffix \\+pool3'),
    ('spec:3+ngram+pool0', 'unknown suffix \\+pool0'),
    ('spec:3+ngram+pool\u00b2', 'unknown suffix'),
    ('spec:3+pool', 'drafts for --algorithm spec with --drafter ngram, bigram or pad, not --algorithm spec '
                    '--drafter self'),
    ('pgj:3+pool', 'is a drafter of spec:W'),
])
def test_a_malformed_bench_method_is_a_clear_error(method, message):
  with pytest.raises(FastmtError, match=message):
    bench.parse_method(method)


def test_well_formed_bench_methods_still_parse():
  assert bench.parse_method('hgj:3:16+bigram')[1].parallel_length == 16
  assert bench.parse_method('ib:4+dedup')[1].dedup_ngram == 2
  assert bench.parse_method('spec:3+ngram@int8')[2] == 'int8'
  assert bench.parse_method('spec:3+ngram')[1].ngram_memory == 0
  settings = bench.parse_method('spec:3+ngram2048')[1]
  assert (settings.drafter, settings.ngram_memory, settings.block_size) == ('ngram', 2048, 3)
  settings = bench.parse_method('spec:3+ngram2048+pool2@bf16')[1]
  assert (settings.drafter, settings.ngram_memory, settings.ngram_pool) == ('ngram', 2048, 2)
  assert (bench.parse_method('spec:2+pad+pool')[1].drafter, bench.parse_method('spec:2+pad+pool')[1].ngram_pool) == \
      ('pad', 1)
  label, settings, dtype = bench.parse_method('spec:6+int8')  # the model's int8 copy drafts; it decodes in float32
  assert (label, settings.drafter, settings.block_size, dtype) == ('spec:6+int8', 'int8', 6, 'float32')


def test_positional_arguments_are_refused_by_every_tool():
  """absl leaves words that are not flags in argv: `--methods greedy beam:4` would have measured greedy
  alone, without a word."""
  called = []
  main = cli.exit_on_user_error(called.append)
  with pytest.raises(SystemExit, match=r"Unexpected arguments: \['beam:4'\]"):
    main(['fastmt-bench', 'beam:4'])
  main(['fastmt-bench'])
  assert called == [['fastmt-bench']]


def test_a_closed_pipe_ends_a_tool_quietly_and_a_full_disk_in_one_line():
  """`decode.py ... | head -1` closes the pipe early: no traceback, the exit status of a tool killed by SIGPIPE.
  A full disk (`--output /dev/full`) is one line; other OSErrors are bugs and keep their tracebacks."""
  import errno  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  script = ('from fastmt import cli\n'
            'def main(argv):\n'
            '  for i in range(200000):\n'
            '    print("line", i)\n'
            'cli.exit_on_user_error(main)(["tool"])\n')
  process = subprocess.Popen([sys.executable, '-c', script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  assert process.stdout.readline() == b'line 0\n'
  process.stdout.close()
  stderr = process.stderr.read().decode()
  assert process.wait(timeout=60) == 141 and stderr == '', stderr

  def full_disk(argv):
    raise OSError(errno.ENOSPC, 'No space left on device')

  with pytest.raises(SystemExit, match='error: .*No space left on device'):
    cli.exit_on_user_error(full_disk)(['tool'])

  def missing_internal_file(argv):
    raise FileNotFoundError(errno.ENOENT, 'No such file or directory')

  with pytest.raises(FileNotFoundError):
    cli.exit_on_user_error(missing_internal_file)(['tool'])


@pytest.mark.parametrize('signal_name', ['SIGTERM', 'SIGINT'])
def test_a_signal_that_lands_in_a_garbage_collector_callback_still_ends_the_tool(signal_name):
  """Python runs a signal's handler between any two bytecodes, also inside a gc callback (jax has one),
  where its exception is printed as 'Exception ignored' and dropped: training and decode.py went on to the
  end and exited 0 after a SIGTERM (2 times in 6). The dropped exception is delivered again."""
  script = ('import gc, os, signal, sys, time\n'
            'from fastmt import cli\n'
            'signal.signal(signal.SIGINT, signal.default_int_handler)\n'
            'cli.exit_cleanly_on_termination()\n'
            'sent = []\n'
            'def callback(phase, info):\n'
            '  if not sent:\n'
            '    sent.append(phase)\n'
            f'    os.kill(os.getpid(), signal.{signal_name})\n'
            '    sum(range(1000))  # bytecodes after the signal: its handler runs here, inside the callback\n'
            'gc.callbacks.append(callback)\n'
            'def main(argv):\n'
            '  gc.collect()\n'
            '  assert sent\n'
            '  time.sleep(5)\n'
            '  print("went on to the end")\n'
            'cli.exit_on_user_error(main)(["tool"])\n')
  result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, cwd=REPO, timeout=60)
  signum = getattr(signal, signal_name)
  assert result.returncode == 128 + signum, result.stderr
  assert 'went on' not in result.stdout and 'Exception ignored' not in result.stderr, result.stderr


def test_a_ctrl_c_while_the_flags_are_defined_ends_the_tool_and_its_aftermath_is_not_printed():
  """cli.run installed its handlers after defining the flags, which imports JAX: a Ctrl-C landing in JAX's gc
  callback then was dropped and decode.py translated the whole file and exited 0. And the work an interrupt
  cut short (orbax's reads) printed 'Exception ignored' tracebacks and 'never awaited' warnings at exit."""
  script = ('import gc, os, signal, sys, time\n'
            'from fastmt import cli\n'
            'signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a test may inherit none)\n'
            'sys.argv = ["tool"]\n'
            'def define_flags():\n'
            '  def callback(phase, info):\n'
            '    gc.callbacks.remove(callback)\n'
            '    os.kill(os.getpid(), signal.SIGINT)\n'
            '    sum(range(1000))  # the handler runs here, inside the callback\n'
            '  gc.callbacks.append(callback)\n'
            '  gc.collect()\n'
            '  time.sleep(5)  # importing JAX: the dropped interrupt is delivered again meanwhile\n'
            'class CutShort:\n'
            '  def __del__(self):\n'
            '    raise RuntimeError("Event loop is closed")\n'
            'def main(argv):\n'
            '  print("went on to the end")\n'
            'left = CutShort()  # collected at exit, after the interrupt\n'
            'cli.run(main, define_flags)\n')
  result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, cwd=REPO, timeout=60)
  assert result.returncode == 128 + signal.SIGINT, result.stderr
  assert 'went on' not in result.stdout and result.stderr == 'tool: interrupted\n', result.stderr


@pytest.mark.parametrize('signal_name', ['SIGTERM', 'SIGINT'])
def test_a_signal_while_xla_compiles_ends_the_tool_with_its_status_not_a_crash(signal_name, tmp_path):
  """jaxlib's wait for a compile lets the signal's exception out while XLA goes on compiling on its own
  threads; jax's exit hook then destroyed the XLA client under that compile: SIGSEGV, status 139 (fastmt-distill
  stopped while compiling a chunk's new shape, 2 times in 3; here every time). The tool now ends without that
  teardown, after its cleanups, threads and other exit hooks, with the signal's status."""
  script = ('import atexit, os, signal, sys, threading\n'
            'from fastmt import cli\n'
            'signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a test may inherit none)\n'
            'def main(argv):\n'
            '  import jax, jax.numpy as jnp\n'
            '  def f(x):\n'
            '    for i in range(300):\n'
            '      x = jnp.sin(x @ x + i + os.getpid())  # this process\'s own program: in no compilation cache\n'
            '    return x\n'
            '  lowered = jax.jit(f).lower(jnp.ones((8, 8)))\n'
            '  atexit.register(lambda: print("exit hook ran", flush=True))\n'
            f'  threading.Timer(0.2, os.kill, (os.getpid(), signal.{signal_name})).start()\n'
            '  try:\n'
            '    lowered.compile()  # seconds on 2 cores: the signal comes while XLA compiles\n'
            '  finally:\n'
            '    print("cleanup ran", flush=True)\n'
            '  print("compiled before the signal came")\n'
            'cli.run(main)\n')
  signum = getattr(signal, signal_name)
  env = {**os.environ, 'FASTMT_CACHE': str(tmp_path)}
  result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env=env)
  assert result.returncode == 128 + signum, result.stderr[-2000:]
  assert result.stdout == 'cleanup ran\nexit hook ran\n', result.stdout
  assert 'Fatal Python error' not in result.stderr, result.stderr[-2000:]


def test_a_second_signal_while_the_tool_ends_never_reaches_jaxs_teardown(tmp_path):
  """The first SIGTERM's ending waits for the threads that are not daemons; a second one meanwhile got out of it
  and the interpreter's own exit ran jax's clear_backends after all (the crash of a compile still running)."""
  mark = tmp_path / 'cleared'
  script = ('import os, signal, sys, threading, time\n'
            'from fastmt import cli\n'
            'import jax._src.api as jax_api\n'
            f'jax_api.clear_backends = lambda *a, **k: open({str(mark)!r}, "w").write("cleared")\n'
            'def main(argv):\n'
            '  import jax.numpy as jnp\n'
            '  jnp.ones(2).block_until_ready()  # a backend: jax\'s exit hook would clear it\n'
            '  threading.Thread(target=time.sleep, args=(3,)).start()  # not a daemon: the ending waits for it\n'
            '  threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()  # the second, meanwhile\n'
            '  os.kill(os.getpid(), signal.SIGTERM)\n'
            '  time.sleep(30)\n'
            'cli.run(main)\n')
  result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**os.environ, 'FASTMT_CACHE': str(tmp_path)})
  assert result.returncode == 128 + signal.SIGTERM, result.stderr[-2000:]
  assert not mark.exists(), 'jax\'s exit hook ran'


def test_the_tools_keep_compiled_programs_in_fastmts_cache_unless_told_otherwise(tmp_path):
  """cli.run's persistent compilation cache: $FASTMT_CACHE/xla by default, so that a second run of a tool
  loads its decoders instead of compiling them again; JAX_COMPILATION_CACHE_DIR wins; FASTMT_XLA_CACHE=0 is off.
  In a subprocess each: it sets jax's process-wide configuration."""
  script = ('import os, jax\n'
            'from fastmt import cli\n'
            'directory = cli.use_persistent_compilation_cache()\n'
            'jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)\n'  # keep even a tiny program
            'jax.jit(lambda x: x * 3 + 1)(2.0).block_until_ready()\n'
            'print(directory, sorted(os.listdir(directory)) if directory else None)\n')
  base = {k: v for k, v in os.environ.items() if k not in ('JAX_COMPILATION_CACHE_DIR', 'FASTMT_XLA_CACHE')}
  base['FASTMT_CACHE'] = str(tmp_path / 'cache')
  runs = {'default': {}, 'jax': {'JAX_COMPILATION_CACHE_DIR': str(tmp_path / 'theirs')},
          'off': {'FASTMT_XLA_CACHE': '0', 'FASTMT_CACHE': str(tmp_path / 'off')}}
  printed = {}
  for name, env in runs.items():
    result = subprocess.run([sys.executable, '-c', script], env={**base, **env}, cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    printed[name] = result.stdout.strip().splitlines()[-1]
  directory, _, entries = printed['default'].partition(' ')
  assert directory == str(tmp_path / 'cache' / 'xla') and entries != '[]', printed
  assert printed['jax'].startswith(str(tmp_path / 'theirs')) and '[]' not in printed['jax'], printed
  assert printed['off'] == 'None None' and not (tmp_path / 'off').exists(), printed


def test_bench_refuses_counts_that_would_fail_after_the_work_before_loading_anything(tmp_path):
  commands = {'--repeats=0': '--repeats must be >= 1', '--limit=-3': '--limit must be >= 0',
              '--methods=greedy:4': 'greedy takes at most 0 numbers',
              '--methods=greedy,pgj:3,greedy': '--methods names greedy more than once',  # one row, silently
              'beam:4': "Unexpected arguments: ['beam:4']",  # as in `--methods greedy beam:4`, through cli.run
              '--baseline=beam:4': '--baseline must be a greedy row',  # the floor prices one-position calls
              '--methods=greedy,ib --baseline=greedy@int8': '--baseline greedy@int8 is not one of --methods'}
  processes = {flag: subprocess.Popen([sys.executable, '-m', 'fastmt.bench', '--workdir', str(tmp_path / 'none'),
                                       *flag.split(' ')],
                                      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for flag in commands}
  for flag, process in processes.items():
    _, stderr = process.communicate(timeout=300)
    assert process.returncode != 0 and commands[flag] in stderr and 'Traceback' not in stderr, (flag, stderr)


def test_export_split_checks_its_output_before_loading_the_dataset(tmp_path):
  (tmp_path / 'test.en').write_text('In the beginning\n')
  (tmp_path / 'test.de').write_text('Im Anfang\n')
  dataset = ml_collections.ConfigDict({'name': 'text', 'test_files': (str(tmp_path / 'test.en'),
                                                                      str(tmp_path / 'test.de'))})
  with pytest.raises(MissingError, match='no directory'):
    export_split.export_split(dataset, 'test', str(tmp_path / 'missing' / 'test'))
  dataset.train_files = (str(tmp_path / 'train.src'), str(tmp_path / 'train.ref'))
  (tmp_path / 'train.src').write_text('kept\n')
  with pytest.raises(FastmtError, match="train.src is one of the dataset's own files"):
    export_split.export_split(dataset, 'test', str(tmp_path / 'train'))  # another split's file is kept too
  dataset.test_files = (str(tmp_path / 'test.src'), str(tmp_path / 'test.de'))
  (tmp_path / 'test.src').write_text('In the beginning\n')
  with pytest.raises(FastmtError, match="test.src is one of the dataset's own files"):
    export_split.export_split(dataset, 'test', str(tmp_path / 'test'))
  assert (tmp_path / 'test.src').read_text() == 'In the beginning\n'  # not erased
  assert export_split.export_split(dataset, 'test', str(tmp_path / 'out')) == 1
  assert (tmp_path / 'out.ref').read_text() == 'Im Anfang\n'


def test_export_split_keeps_a_sentence_with_a_line_break_on_one_line(tmp_path, caplog):
  """A sentence holding a line break that str.splitlines() honours (a tfds dataset's, or U+2028 inside a line of
  a text file) was written as it was: a reader of the .src file saw one line more than the .ref file had."""
  (tmp_path / 'test.en').write_text('In the\u2028beginning\nAnd God\x0bsaid\nLet there be light\n', encoding='utf-8')
  (tmp_path / 'test.de').write_text('Im Anfang\nUnd Gott sprach\nEs werde Licht\n', encoding='utf-8')
  dataset = ml_collections.ConfigDict({'name': 'text', 'test_files': (str(tmp_path / 'test.en'),
                                                                      str(tmp_path / 'test.de'))})
  assert export_split.export_split(dataset, 'test', str(tmp_path / 'out')) == 3
  sources = (tmp_path / 'out.src').read_text(encoding='utf-8')
  assert sources.splitlines() == ['In the beginning', 'And God said', 'Let there be light']
  assert len((tmp_path / 'out.ref').read_text(encoding='utf-8').splitlines()) == 3
  assert 'out.src: 2 sentences held line breaks' in caplog.text and 'out.ref' not in caplog.text


def test_distillation_refuses_a_chunk_of_nothing_and_its_teachers_directory(tmp_path):
  with pytest.raises(FastmtError, match='chunk_sentences must be >= 1'):
    distill.distill(str(tmp_path), ['a'], str(tmp_path / 'kd'), chunk_sentences=0)  # looped forever before
  with pytest.raises(FastmtError, match='is the teacher work directory'):
    distill.distill(str(tmp_path), ['a'], str(tmp_path) + '/')
  with pytest.raises(FastmtError, match='is the student work directory'):
    distill.distill(str(tmp_path / 'teacher'), ['a'], str(tmp_path / 'student'), student_workdir=str(tmp_path / 'student'))
  # a student's own run directory given as the output: the teacher's spm.model replaced the student's
  run = tmp_path / 'run'
  run.mkdir()
  (run / workdir_lib.MODEL_CONFIG_FILE).write_text('{}')
  (run / workdir_lib.TOKENIZER_FILE).write_bytes(b'the student vocabulary')
  with pytest.raises(FastmtError, match='is a train.py work directory .*model_config.json'):
    distill.distill(str(tmp_path / 'teacher'), ['a'], str(run))
  assert (run / workdir_lib.TOKENIZER_FILE).read_bytes() == b'the student vocabulary'
  with pytest.raises(FastmtError, match='batch_size must be >= 1'):  # after the output directory was made
    distill.distill(str(tmp_path / 'teacher'), ['a'], str(tmp_path / 'kd0'), batch_size=0)
  assert not (tmp_path / 'kd0').exists()


def test_clusters_of_a_direction_the_bible_dataset_lacks_are_refused(tmp_path):
  """'bible/en_de' translates en_de only: clusters saved as en_fr were recorded as of a direction the model never
  translates. A 'text' dataset names no direction: any name is the user's."""
  for name, direction, refused in (('bible/en_de', 'en_fr', True), ('bible/en_de', 'en_de', False),
                                   ('bible/en_de+en_fr', 'en_fr', False), ('bible/en_de+en_fr', 'en_es', True),
                                   ('text', 'mine', False), ('bible/en_de:reverse', 'de_en', False),
                                   ('bible/en_de:reverse', 'en_de', False), ('bible/en_de:reverse', 'de_fr', True)):
    # A reversed one-direction model translates de_en: its true name was refused (en_de is kept, as before).
    name, _, reverse = name.partition(':')
    (tmp_path / workdir_lib.TRAIN_CONFIG_FILE).write_text(json.dumps({'dataset': {'name': name,
                                                                                   'reverse': bool(reverse)}}))
    if refused:
      with pytest.raises(FastmtError, match=f"--direction '{direction}': .* trained on {re.escape(name)}"):
        clusters_lib._check_direction_of_the_dataset(str(tmp_path), direction)  # pylint: disable=protected-access
    else:
      clusters_lib._check_direction_of_the_dataset(str(tmp_path), direction)  # pylint: disable=protected-access


def test_averaging_refuses_an_output_that_holds_files_or_lies_inside_the_run(trained_workdir, tmp_path):
  """A non-empty directory kept its files beside the new model (a user's config.json overwritten); an output
  under the run's checkpoints/ became its unreadable latest step."""
  from fastmt import checkpoint_average  # pylint: disable=g-import-not-at-top
  held = tmp_path / 'held'
  held.mkdir()
  (held / 'config.json').write_text('{"mine": 1}')
  with pytest.raises(FastmtError, match='is a directory that holds files'):
    checkpoint_average.check_output(trained_workdir, str(held))
  with pytest.raises(FastmtError, match='is inside --workdir'):
    checkpoint_average.check_output(trained_workdir, os.path.join(trained_workdir, 'checkpoints', '999'))
  with pytest.raises(FastmtError, match='is inside --workdir'):  # its relative path '..avg' passed as outside
    checkpoint_average.check_output(trained_workdir, os.path.join(trained_workdir, '..avg'))
  (tmp_path / 'empty').mkdir()
  checkpoint_average.check_output(trained_workdir, str(tmp_path / 'empty'))  # new or empty: fine
  checkpoint_average.check_output(trained_workdir, str(tmp_path / 'new'))
  # a run without its vocabulary: a FileNotFoundError after reading the checkpoints, and a half-made --output
  damaged = tmp_path / 'damaged'
  shutil.copytree(trained_workdir, damaged)
  (damaged / workdir_lib.TOKENIZER_FILE).unlink()
  with pytest.raises(MissingError, match='has no spm.model: the work directory is damaged'):
    checkpoint_average.check_output(str(damaged), str(tmp_path / 'averaged'))
  assert not (tmp_path / 'averaged').exists()
  (tmp_path / 'unsaved' / workdir_lib.CHECKPOINT_DIR).mkdir(parents=True)  # a run killed before its first save
  with pytest.raises(MissingError, match='No checkpoint under .*: the run saved none yet'):
    checkpoint_average.last_steps(str(tmp_path / 'unsaved'), 2)


def test_files_of_one_result_are_written_all_or_none(tmp_path, monkeypatch):
  """export-split's .src and .ref, a bench's results.json, table.md and hypotheses: a full disk (or a kill)
  while writing the second left a new .src beside the old .ref, each line paired with another sentence."""
  from fastmt import files  # pylint: disable=g-import-not-at-top
  first, second = tmp_path / 'out.src', tmp_path / 'out.ref'
  first.write_text('old source\n')
  second.write_text('old reference\n')
  real_fsync, synced = os.fsync, []

  def disk_full_at_the_second(fd):
    synced.append(fd)
    if len(synced) == 2:
      raise OSError(28, 'No space left on device')
    real_fsync(fd)

  monkeypatch.setattr(files.os, 'fsync', disk_full_at_the_second)
  with pytest.raises(OSError, match='No space left'):
    files.write_all_whole({str(first): 'new source\n', str(second): 'new reference\n'})
  assert (first.read_text(), second.read_text()) == ('old source\n', 'old reference\n')
  assert sorted(os.listdir(tmp_path)) == ['out.ref', 'out.src']  # no temporary file left
  monkeypatch.setattr(files.os, 'fsync', real_fsync)
  files.write_all_whole({str(first): 'new source\n', str(second): 'new reference\n'})
  assert (first.read_text(), second.read_text()) == ('new source\n', 'new reference\n')
  # the bench: an earlier run's hypotheses of other methods go once the new files are written; a hypothesis
  # holding a line break stays on its line
  bench_dir = tmp_path / 'bench'
  bench_dir.mkdir()
  (bench_dir / 'hyp.pgj_3.txt').write_text('an earlier run\n')
  bench.write_outputs(str(bench_dir), [], {'sentences': 2}, {'greedy': ['Im\u2028Anfang', 'Gott']}, '| table |')
  assert sorted(os.listdir(bench_dir)) == ['hyp.greedy.txt', 'results.json', 'table.md']
  assert (bench_dir / 'hyp.greedy.txt').read_text(encoding='utf-8') == 'Im Anfang\nGott\n'
  assert json.loads((bench_dir / 'results.json').read_text())['environment'] == {'sentences': 2}


def test_bench_and_clusters_check_their_flags_against_the_model_before_decoding(trained_workdir, tmp_path):
  """fastmt-bench --baseline greedy@int8 without --methods benched every default method and then left the
  speed-up columns blank; fastmt-clusters --tag_inputs fitted its clusters to a tag the vocabulary spells in
  pieces, and had no --plugins flag, which its own error message asked for."""
  (tmp_path / 'in.txt').write_text('In the beginning\n')
  commands = {('-m', 'fastmt.bench', '--baseline', 'greedy@int8'):
                  '--baseline greedy@int8 is not one of the methods benched without --methods',
              ('-m', 'fastmt.clusters_lib', '--direction', 'en_de', '--input', str(tmp_path / 'in.txt'),
               '--tag_inputs'): '--tag_inputs: the vocabulary has no <2de> symbol',
              ('-m', 'fastmt.clusters_lib', '--direction', 'en_de', '--plugins', 'no_such_plugin_module'):
                  'no_such_plugin_module'}
  for command, message in commands.items():
    result = subprocess.run([sys.executable, *command, '--workdir', trained_workdir], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and message in result.stderr and 'Traceback' not in result.stderr, result.stderr
    assert 'Unknown command line flag' not in result.stderr, result.stderr


def test_every_tool_refuses_an_output_directory_that_is_a_file_before_any_work(tmp_path):
  """os.makedirs failed with a traceback at the end of the work (a whole bench, a translation pass)."""
  taken = tmp_path / 'taken'
  taken.write_text('kept\n')
  (tmp_path / 'clusters').mkdir()
  (tmp_path / 'clusters' / 'en_de').write_text('kept\n')
  none = str(tmp_path / 'none')  # no model: each refusal comes before one would load
  commands = {
      'bench': ['-m', 'fastmt.bench', '--workdir', none, '--output_dir', str(taken)],
      'distill': ['-m', 'fastmt.distill', '--teacher', none, '--output_dir', str(taken)],
      'average': ['-m', 'fastmt.checkpoint_average', '--workdir', none, '--output', str(taken)],
      'clusters': ['-m', 'fastmt.clusters_lib', '--workdir', str(tmp_path), '--direction', 'en_de'],
      'decode': [str(REPO / 'decode.py'), '--workdir', none, '--input', str(taken), '--ddgviz', str(taken)],
  }
  processes = {tool: subprocess.Popen([sys.executable, *command], cwd=REPO, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for tool, command in commands.items()}
  for tool, process in processes.items():
    _, stderr = process.communicate(timeout=300)
    assert process.returncode != 0 and 'is a file, not a directory' in stderr, (tool, stderr)
    assert 'Traceback' not in stderr and len(stderr.strip().splitlines()) == 1, (tool, stderr)
  assert taken.read_text() == 'kept\n'


def test_an_output_directory_under_a_file_or_on_a_read_only_file_system_is_refused_at_once(tmp_path):
  """os.path.exists passed both; os.makedirs, or the first write, failed after the work."""
  taken = tmp_path / 'taken'
  taken.write_text('kept\n')
  with pytest.raises(FastmtError, match="cannot be created: .*taken' is a file"):
    cli.check_output_directory(str(taken / 'out' / 'deeper'), '--output_dir')
  if os.path.isdir('/proc/self'):  # Linux: proc refuses new files, even to root (who passes os.access anywhere)
    with pytest.raises(FastmtError, match="--output_dir '/proc/fastmt-out' cannot be written: .* in '/proc'"):
      cli.check_output_directory('/proc/fastmt-out', '--output_dir')
  cli.check_output_directory(str(tmp_path / 'new' / 'deeper'), '--output_dir')  # made later, at the end
  cli.check_output_directory(str(tmp_path), '--output_dir')
  assert sorted(os.listdir(tmp_path)) == ['taken']  # the probe leaves nothing behind, makes nothing


def test_distillation_reads_only_the_training_split():
  """A student trains on it; validation and test are what models are scored on (the CLI distilled them)."""
  bible = ml_collections.ConfigDict({'name': 'bible/en_de'})
  assert distill.split_to_distil('train[:8000]', bible) == 'train[:8000]'
  assert distill.split_to_distil(None, bible) == 'train'
  for split in ('test', 'validation[:10]', 'train+test'):
    with pytest.raises(FastmtError, match=r"--split must be the training split or a slice of it"):
      distill.split_to_distil(split, bible)


def test_clusters_need_sentences_before_any_model_loads(tmp_path, trained_workdir, monkeypatch):
  monkeypatch.setattr(workdir_lib, 'restore_params', lambda *a, **k: pytest.fail('loaded before checking'))
  with pytest.raises(FastmtError, match='top_k 100000 is above the vocabulary size'):  # top_k's traceback, late
    clusters_lib.build_for_workdir(trained_workdir, 'en_de', ['a'], num_clusters=4, top_k=100000)
  with pytest.raises(FastmtError, match='no source sentences'):
    clusters_lib.build_for_workdir(str(tmp_path), 'en_de', ['', '  '], num_clusters=4, top_k=2)
  with pytest.raises(FastmtError, match='num_clusters and top_k must be >= 1'):
    clusters_lib.build_for_workdir(str(tmp_path), 'en_de', ['a'], num_clusters=0, top_k=2)


def test_a_damaged_training_config_record_is_a_fastmt_error(tmp_path):
  (tmp_path / workdir_lib.TRAIN_CONFIG_FILE).write_text('{"dataset": ')
  with pytest.raises(FastmtError, match='is not valid JSON'):
    workdir_lib.load_train_config(str(tmp_path))
  (tmp_path / workdir_lib.TRAIN_CONFIG_FILE).write_text(json.dumps([1, 2]))
  with pytest.raises(FastmtError, match='holds list, not a config'):
    workdir_lib.load_train_config(str(tmp_path))


def test_bench_outputs_hold_only_this_runs_hypotheses(tmp_path):
  bench.write_outputs(str(tmp_path), [bench.MethodResult('greedy'), bench.MethodResult('beam:4')], {},
                      {'greedy': ['a'], 'beam:4': ['b']}, 'table')
  assert sorted(p.name for p in tmp_path.glob('hyp.*.txt')) == ['hyp.beam_4.txt', 'hyp.greedy.txt']
  bench.write_outputs(str(tmp_path), [bench.MethodResult('greedy')], {}, {'greedy': ['c']}, 'table')
  assert [p.name for p in tmp_path.glob('hyp.*.txt')] == ['hyp.greedy.txt']  # beam:4's is not this run's
  assert (tmp_path / 'hyp.greedy.txt').read_text() == 'c\n'
  assert json.loads((tmp_path / 'results.json').read_text())['results'][0]['method'] == 'greedy'


def test_rebuilt_clusters_never_pair_old_metadata_with_new_arrays(tmp_path, monkeypatch):
  """A rebuild killed while its arrays are written leaves no metadata (load_clusters: "No clusters"), not the
  old fingerprint beside new arrays."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from fastmt import projection  # pylint: disable=g-import-not-at-top
  clusters = projection.Clusters(jnp.zeros((2, 4)), jnp.zeros((2,)), jnp.zeros((2, 3), jnp.int32), 8, 3)
  clusters_lib.save_clusters(str(tmp_path), clusters, {'fingerprint': 'old'})
  assert json.loads((tmp_path / clusters_lib.METADATA).read_text())['fingerprint'] == 'old'

  class Killed(Exception):
    pass

  def killed_while_saving(*args, **kwargs):
    raise Killed()
  monkeypatch.setattr(clusters_lib.ocp.StandardCheckpointer, 'save', killed_while_saving)
  with pytest.raises(Killed):
    clusters_lib.save_clusters(str(tmp_path), clusters, {'fingerprint': 'new'})
  with pytest.raises(MissingError, match='No clusters'):
    clusters_lib.load_clusters(str(tmp_path), None, None, None)


def test_a_translation_is_one_line_for_every_reader():
  """A vocabulary trained on text with NEL, U+2028 or a form feed can output them; str.splitlines() breaks a
  line there, so a reader of decode.py's output that uses it saw more lines than inputs."""
  from fastmt.decode_lib import one_line  # pylint: disable=g-import-not-at-top
  assert one_line('a\nb\rc\x0bd\x0ce\x1cf\x1dg\x1eh\x85i\u2028j\u2029k') == 'a b c d e f g h i j k'
  for code in range(0x110000):
    if not 0xD800 <= code < 0xE000:  # surrogates are no characters of a decoded str
      assert len(one_line(f'x{chr(code)}y').splitlines()) == 1, hex(code)


@pytest.mark.parametrize('n', range(1, 9))
def test_timing_rounds_put_every_method_everywhere_and_after_every_other_equally_often(n):
  """fastmt.rounds: a rotation kept each method right after the same one in every round of the bench (a
  read-only review of the bench found it); a Williams design balances positions and neighbours."""
  from fastmt import rounds  # pylint: disable=g-import-not-at-top
  items = [f'm{i}' for i in range(n)]
  cycle = n if n % 2 == 0 else 2 * n
  orders = [rounds.round_order(items, r) for r in range(cycle)]
  assert all(sorted(order) == items for order in orders)
  assert orders == [rounds.round_order(items, r) for r in range(cycle, 2 * cycle)]  # it repeats
  positions = {(item, order.index(item)) for order in orders for item in items}
  assert len(positions) == n * n  # every method in every position
  for item in items:
    per_position = [sum(order[p] == item for order in orders) for p in range(n)]
    assert len(set(per_position)) == 1
  if n > 1:
    pairs = [(a, b) for order in orders for a, b in zip(order, order[1:])]
    counts = {pair: pairs.count(pair) for pair in set(pairs)}
    assert len(counts) == n * (n - 1) and len(set(counts.values())) == 1  # every neighbour equally often


def test_a_work_directory_record_is_written_whole_or_left_as_it_was(tmp_path, monkeypatch):
  """files.write_whole, the one writer of the work directory's records (vocabulary, configs, objective,
  manifests, caches): a full disk or an interrupt mid-write leaves the old file and no temporary one (the
  records' writers each had their own: a fixed 'name.tmp' shared by two writers, left behind by a failure, or
  no temporary file at all, so a kill left half a record)."""
  from fastmt import files  # pylint: disable=g-import-not-at-top
  path = tmp_path / 'record.json'
  umask = os.umask(0o022)
  try:
    files.write_whole(str(path), '{"old": "ü"}')
    assert json.loads(path.read_text(encoding='utf-8')) == {'old': 'ü'}
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)  # as open() makes it, not mkstemp's 0600
    path.chmod(0o640)
    files.write_whole(str(path), b'{"new": 1}')
    assert json.loads(path.read_bytes()) == {'new': 1}
    assert oct(path.stat().st_mode & 0o777) == oct(0o640)  # a file's own permissions are kept
    os.umask(0o077)  # a user who keeps new files private
    files.write_whole(str(tmp_path / 'private.json'), '{}')
    assert oct((tmp_path / 'private.json').stat().st_mode & 0o777) == oct(0o600)
  finally:
    os.umask(umask)
  (tmp_path / 'private.json').unlink()

  def full_disk(fd):
    raise OSError(28, 'No space left on device')
  monkeypatch.setattr(os, 'fsync', full_disk)
  with pytest.raises(OSError, match='No space'):
    files.write_whole(str(path), '{"half": ')
  monkeypatch.undo()

  def interrupted(source, target):
    raise KeyboardInterrupt
  monkeypatch.setattr(os, 'replace', interrupted)
  with pytest.raises(KeyboardInterrupt):
    files.write_whole(str(path), '{"never": 1}')
  monkeypatch.undo()
  assert json.loads(path.read_bytes()) == {'new': 1}
  assert os.listdir(tmp_path) == ['record.json']


def test_the_records_writers_leave_no_temporary_file_when_the_disk_is_full(tmp_path, monkeypatch):
  """The distillation manifest (like the train config, batch plan and history) went through a fixed
  'path.tmp', which a failure left beside the record; now through files.write_whole."""
  workdir_lib.save_objective(str(tmp_path), 'at', {})
  before = sorted(os.listdir(tmp_path))

  def full_disk(fd):
    raise OSError(28, 'No space left on device')
  monkeypatch.setattr(os, 'fsync', full_disk)
  with pytest.raises(OSError):
    distill._write_manifest(str(tmp_path), {'sentences': 3})
  monkeypatch.undo()
  assert sorted(os.listdir(tmp_path)) == before
