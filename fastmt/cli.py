"""What every fastmt command-line tool shares: flag parsing and error handling that end in one clear line.

A FastmtError (bad input: a flag, a file, a work directory, a checkpoint) prints its message and exits 1;
any other exception keeps its traceback, since it is a bug to report, not a user's mistake.
"""

import atexit
import errno
import functools
import importlib
import importlib.util
import os
import signal
import sys
import tempfile
import threading
import time
import warnings
import _thread

from absl import app, flags

from fastmt.errors import FastmtError


def tool_name() -> str:
  """The running tool's name for its messages: `fastmt-translate` or `decode.py`, not the path of the
  virtual environment's script or of the module."""
  return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else 'fastmt'


def parse_flags_or_exit(argv):
  """absl flags parser for app.run: an unknown config key or bad value exits with one clear message."""
  overrides = [a.split('=', 1)[0] for a in argv[1:] if a.startswith('--config.')]
  twice = sorted({o for o in overrides if overrides.count(o) > 1})
  if twice:  # ml_collections joins a tuple given twice, (12, 16) and (20,) -> (12, 16, 20), where one expects the last
    sys.exit(f'{tool_name()}: error: {", ".join(twice)} given more than once: give each config override once')
  try:
    remaining = flags.FLAGS(argv)
  except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as e:
    key, hint = _missing_key(e)
    overrides = [a.split('=', 1)[0] for a in argv if a.startswith('--config.')]
    named = [o for o in overrides if key in o.split('.')[1:]]
    hint = f' ({hint[0].lower()}{hint[1:]})' if hint else ''
    if named:  # ml_collections: an override of a key the (locked) config does not have
      sys.exit(f'{tool_name()}: error: bad config override {", ".join(named)}: the config has no key {key!r}{hint}')
    if key is not None:  # a KeyError of the config file itself
      sys.exit(f'{tool_name()}: error: bad config: KeyError {key!r} while loading it{hint}')
    what = 'bad flag or config override' if 'config' in flags.FLAGS else 'bad flag'  # train.py has --config
    sys.exit(f'{tool_name()}: error: {what}: {one_line_message(e)}')
  for name in PATH_FLAGS:  # '--workdir=~/runs/x': the shell expands '~' only at the start of a word
    if name in flags.FLAGS and isinstance(flags.FLAGS[name].value, str) and flags.FLAGS[name].value.startswith('~'):
      flags.FLAGS[name].value = os.path.expanduser(flags.FLAGS[name].value)
  return remaining


# The tools' flags that name files or directories: '~' in them is the home directory, as in fastmt.load.
PATH_FLAGS = ('workdir', 'input', 'output', 'reference', 'metrics_json', 'drafter_workdir', 'clusters', 'ddgviz',
              'output_dir', 'output_prefix', 'student_workdir', 'teacher')


def _missing_key(error: BaseException) -> tuple[str | None, str]:
  """(the key of a KeyError anywhere in the exception's chain (absl wraps ml_collections' own), else None;
  ml_collections' suggestion after it, such as 'Did you mean "emb_dim" instead of "emb_dimm"?', else '')."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, KeyError):
      text = str(error.args[0]).replace('\\n', '\n').replace("\\'", "'") if error.args else ''
      key, _, hint = text.partition('\n')
      return key.strip('\'"'), ' '.join(hint.split())
    error = error.__cause__ or error.__context__
  return None, ''


def one_line_message(error: Exception) -> str:
  """An exception's message on one line; a traceback embedded in it (ml_collections puts a config file's
  own error there) is cut down to its last line, the error itself."""
  text = str(error).replace('\\n', '\n').replace("\\'", "'").strip()
  if 'Traceback (most recent call last)' in text:
    head, tail = text.split('Traceback (most recent call last)', 1)
    last = [line.strip() for line in tail.splitlines() if line.strip()][-1:]
    text = ' '.join([head.strip().rstrip(':') + ':', *last])
  return ' '.join(line.strip() for line in text.splitlines() if line.strip())


# A full disk or a refused write: the machine's state, reported in one line like a user's error (any other
# OSError keeps its traceback).
_MACHINE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM)


def exit_on_user_error(main):
  """Wraps an absl main: a FastmtError ends the program with its one-line message instead of a traceback.
  No fastmt tool takes positional arguments, so any left after the flags is an error (a value meant for a
  list flag, `--methods greedy beam:4`, would otherwise be dropped without a word)."""
  @functools.wraps(main)
  def wrapped(argv):
    try:
      if len(argv) > 1:
        raise FastmtError(f'Unexpected arguments: {argv[1:]} (list flags take commas: --methods greedy,beam:4)')
      result = main(argv)
      sys.stdout.flush()  # here, not at exit, so that a closed pipe is handled below
      return result
    except FastmtError as e:
      sys.exit(f'{tool_name()}: error: {e}')
    except KeyboardInterrupt:  # Ctrl-C: a person's choice, not a bug (the output files are left as they were)
      exit_interrupted()
    except _SignalExit as e:  # SIGTERM, SIGHUP: their status, nothing printed
      _quiet_from_now_on()
      end_process(e.code)
    except BrokenPipeError:
      # The reader went away (`decode.py ... | head -1`): stop quietly, as a tool killed by SIGPIPE does.
      # stdout is pointed at /dev/null so that the interpreter's last flush raises nothing more.
      os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
      sys.exit(128 + signal.SIGPIPE)
    except OSError as e:
      if e.errno not in _MACHINE_ERRNOS:
        raise
      sys.exit(f'{tool_name()}: error: {e}')
  return wrapped


def _quiet_from_now_on() -> None:
  """After Ctrl-C or a termination signal (the cleanups have run), the work it cut short (orbax's reads, an
  event loop being made) reports itself as the interpreter exits: 'Exception ignored' tracebacks, 'coroutine
  ... was never awaited'. That is no news to whoever stopped the tool, so it is not printed."""
  sys.unraisablehook = lambda unraisable: None
  warnings.simplefilter('ignore')


def exit_interrupted() -> None:
  """Ends the tool after Ctrl-C: one line, status 130."""
  try:
    print(f'{tool_name()}: interrupted', file=sys.stderr)
  except (OSError, ValueError):  # a closed stderr: the status still says it
    pass
  _quiet_from_now_on()
  end_process(128 + signal.SIGINT)


def end_process(status: int) -> None:
  """Ends the process with `status` once a tool's cleanups have run (its `finally` blocks, after Ctrl-C or a
  termination signal), without the interpreter's teardown of the XLA client.

  The signal can come while XLA compiles a program on its own threads (jaxlib's wait for a compile lets the
  signal's exception out, and the compile goes on). jax's exit hook then destroyed the client under that
  compile: the process crashed (SIGSEGV, status 139 where 143 or 130 was meant; fastmt-distill stopped while it
  compiled a chunk's new shape, 2 times in 3). What the teardown does that matters is done here first, as the
  interpreter does it: the threads that are not daemons are waited for (threading's own exit step, which first
  tells the idle workers of thread pools to end), then the exit hooks run, jax's (clear_backends) left out,
  which flushes the logs; a multi-host run's jax.distributed is shut down as that hook would; then the standard
  streams are flushed. A second signal meanwhile (waiting for a thread) ends it at once, never through the
  teardown."""
  jax_api = sys.modules.get('jax._src.api')
  if jax_api is not None and hasattr(jax_api, 'clean_up'):  # first: a second signal must not reach it either
    atexit.unregister(jax_api.clean_up)
  try:
    threading._shutdown()  # pylint: disable=protected-access  # what the interpreter's exit runs first
    atexit._run_exitfuncs()  # pylint: disable=protected-access  # what the interpreter's exit would run
    if jax_api is not None:  # clean_up's last step, without its clear_backends: other hosts are told
      import jax  # pylint: disable=g-import-not-at-top
      jax.distributed.shutdown()  # a no-op unless jax.distributed.initialize ran
    for stream in (sys.stdout, sys.stderr):
      try:
        if stream is not None:
          stream.flush()
      except (OSError, ValueError):  # a closed pipe or file: nothing more can reach it
        pass
  finally:
    os._exit(status)  # pylint: disable=protected-access


class _SignalExit(SystemExit):
  """The SystemExit a termination signal's handler raises: 128 + N, and the signal, to deliver it again."""

  def __init__(self, signum: int):
    super().__init__(128 + signum)
    self.signum = signum


def _exit_on(signum, frame):
  del frame
  raise _SignalExit(signum)


def _deliver_again(signum: int) -> None:
  time.sleep(0.01)  # let the callback that dropped it return first
  _thread.interrupt_main(signum)  # runs the signal's handler in the main thread, as the signal itself does


def _deliver_dropped_signals_again(unraisable) -> None:
  """sys.unraisablehook: Python runs a signal's handler between any two bytecodes of the main thread, also
  inside a garbage-collector callback (jax has one, called at every collection), a __del__ or a weakref
  callback, where an exception cannot get out: it is printed as 'Exception ignored' and dropped, and the
  tool went on to the end as if never signalled (seen 2 in 6 times with SIGTERM during training). Such a
  dropped signal exception is delivered again a moment later, once that callback has returned."""
  error = unraisable.exc_value
  if isinstance(error, _SignalExit):
    signum = error.signum
  elif isinstance(error, KeyboardInterrupt) and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signum = signal.SIGINT
  else:
    return _previous_unraisablehook(unraisable)
  threading.Thread(target=_deliver_again, args=(signum,), daemon=True).start()


_previous_unraisablehook = sys.unraisablehook


def exit_cleanly_on_termination() -> None:
  """SIGTERM and SIGHUP (kill, timeout, a batch scheduler, a closed terminal) end the tool with an exception
  where they used to end the process at once: the cleanups run as for an error or Ctrl-C (an unfinished output
  file's temporary copy is removed, the training lock let go), and the exit status is the signal's (128 + N).
  A signal this process was started ignoring (nohup's SIGHUP) stays ignored. These and Ctrl-C's exception are
  never lost in a callback that cannot raise (_deliver_dropped_signals_again)."""
  for signum in (signal.SIGTERM, signal.SIGHUP):
    if signal.getsignal(signum) == signal.SIG_DFL:
      signal.signal(signum, _exit_on)
  sys.unraisablehook = _deliver_dropped_signals_again


def check_output_directory(path: str, flag: str) -> None:
  """A directory a tool creates or writes into at the end of its work: refused at the start when it could not
  be (an existing file, a file above it, a place this process cannot write), where os.makedirs or the first
  write would fail only after the work."""
  if os.path.exists(path) and not os.path.isdir(path):
    raise FastmtError(f'{flag} {path!r} is a file, not a directory: give a directory (it is created if missing)')
  existing = os.path.abspath(path)
  while not os.path.exists(existing):  # the folder the missing part would be made in
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise FastmtError(f'{flag} {path!r} cannot be created: {existing!r} is a file')
  try:  # a real write, not os.access: root passes os.access on a read-only file system
    with tempfile.TemporaryFile(dir=existing):
      pass
  except OSError as e:
    raise FastmtError(f'{flag} {path!r} cannot be written: {e.strerror or e} in {existing!r}') from None


def define_plugins_flag() -> None:
  flags.DEFINE_list('plugins', [], 'Python modules to import first (module names, or paths of .py files), '
                    'comma-separated: those that register decoding algorithms or training objectives of your own '
                    '(fastmt.decoding.registry.register_algorithm, fastmt.objectives.register_objective).')


def import_plugins(plugins) -> None:
  """Imports each of --plugins: a module name (on sys.path) or the path of a .py file."""
  for plugin in plugins:
    try:
      if plugin.endswith('.py'):
        if not os.path.isfile(plugin):
          raise FileNotFoundError(f'no file {plugin}')
        path = os.path.realpath(plugin)
        if any(os.path.realpath(getattr(m, '__file__', None) or '') == path for m in list(sys.modules.values())):
          continue  # imported already (by the config file, say): running it again would register twice
        # A name of its own: a plugin file called json.py must not take the standard library's place.
        name = f'fastmt_plugin_{os.path.splitext(os.path.basename(plugin))[0]}'
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
      else:
        importlib.import_module(plugin)
    except FastmtError as e:  # its own registration refused (a name taken, ...)
      raise FastmtError(f'--plugins {plugin}: {e}') from None
    except Exception as e:  # pylint: disable=broad-except
      raise FastmtError(f'--plugins {plugin} cannot be imported: {type(e).__name__}: {one_line_message(e)}') from e


def define_checkpoint_flag(what: str = 'The checkpoint') -> None:
  flags.DEFINE_string('checkpoint', 'latest', f'{what} to restore: latest, best (the best validation BLEU, '
                      'kept with --config.keep_best_checkpoint) or a step number.')


XLA_CACHE_MAX_BYTES = 2 << 30  # the tools' compiled programs kept on disk: the least recently used go first


def use_persistent_compilation_cache() -> str | None:
  """The tools keep XLA's compiled programs in $FASTMT_CACHE/xla (default ~/.cache/fastmt/xla, at most 2 GiB),
  so that a second run of decode.py, fastmt-bench or a resumed train.py on the same model, shapes and jax version
  loads its decoders instead of compiling them again (an HRT decoder of one batch shape took 26 s to compile on
  2 CPU cores). JAX_COMPILATION_CACHE_DIR, when set, is used instead (jax reads it); FASTMT_XLA_CACHE=0 turns the
  default off. Returns the directory used, or None. Programs compiled in under a second are not kept (jax's
  jax_persistent_cache_min_compile_time_secs)."""
  import jax  # pylint: disable=g-import-not-at-top
  if os.environ.get('FASTMT_XLA_CACHE', '1') == '0':
    return None
  if os.environ.get('JAX_COMPILATION_CACHE_DIR') or jax.config.jax_compilation_cache_dir:
    return jax.config.jax_compilation_cache_dir
  directory = os.path.join(os.path.expanduser(os.environ.get('FASTMT_CACHE', '~/.cache/fastmt')), 'xla')
  jax.config.update('jax_compilation_cache_dir', directory)
  if 'JAX_COMPILATION_CACHE_MAX_SIZE' not in os.environ:
    jax.config.update('jax_compilation_cache_max_size', XLA_CACHE_MAX_BYTES)
  return directory


def run(main, define_flags=None, required=()):
  """Entry point of a console script: defines the tool's flags, then runs main under absl with the handlers
  above. `define_flags` is called here, not at import, so that importing any set of fastmt modules together
  never registers a flag twice."""
  main_module = sys.modules.get('__main__')
  if main_module is not None and not main_module.__doc__:
    # absl's --help prints the __main__ module's docstring as the tool's usage; a console script's __main__ is
    # pip's generated wrapper, which has none, so the tool's own module lends its docstring.
    main_module.__doc__ = sys.modules[main.__module__].__doc__
  if sys.stderr is None:  # started with `2>&-`: print(file=None) would put reports and progress on stdout
    sys.stderr = open(os.devnull, 'w', encoding='utf-8')  # pylint: disable=consider-using-with
  # First: defining the flags imports JAX, and a Ctrl-C met inside its garbage-collector callback was dropped
  # there ('Exception ignored'), the tool then running to the end and exiting 0.
  exit_cleanly_on_termination()
  try:
    if define_flags is not None:
      before = set(flags.FLAGS)
      define_flags()
      # --help lists the main module's flags; a console script's main module is its wrapper file, so the
      # tool's flags are declared key flags of that file (absl names the main module by sys.argv[0]).
      for name in set(flags.FLAGS) - before:
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS[name])
    for name in required:
      flags.mark_flag_as_required(name)
    use_persistent_compilation_cache()
  except KeyboardInterrupt:
    exit_interrupted()
  except _SignalExit as e:
    _quiet_from_now_on()
    end_process(e.code)
  app.run(exit_on_user_error(main), flags_parser=parse_flags_or_exit)
