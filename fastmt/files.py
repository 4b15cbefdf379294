"""Small files written whole or not at all: the records of a work directory and its caches.

A kill, a full disk or a second process (another host of a multi-host run, two decode.py runs building one
cache) must never leave half a file where a reader looks: a half-written vocabulary record hides the next
run's changes, a half-written manifest or config is unreadable. Each write goes to a temporary file of this
call's own beside the target, reaches the disk, and replaces the target in one rename.

(Checkpoints are orbax's; decode.py's output, written as it is translated, has a temporary file of its own:
fastmt.decode_lib.replaced_on_success.)
"""

import os
import stat
import tempfile


def mode_for(path: str) -> int:
  """The permission bits a file written to `path` gets: an existing file's own (private or shared), else
  what open(path, 'w') would give a new one (0666 less the umask). A temporary file is made 0600 and would
  otherwise pass that on to the file it replaces."""
  try:
    return stat.S_IMODE(os.stat(path).st_mode)
  except FileNotFoundError:
    return 0o666 & ~_umask()


def _umask() -> int:
  # /proc says it without changing it; os.umask can only be read by setting it, a moment in which another
  # thread's new files would get the wrong mode.
  try:
    with open('/proc/self/status', encoding='ascii') as f:
      for line in f:
        if line.startswith('Umask:'):
          return int(line.split()[1], 8)
  except (OSError, ValueError):
    pass
  umask = os.umask(0)
  os.umask(umask)
  return umask


def write_whole(path: str, data: bytes | str) -> None:
  """path holds `data` (str: UTF-8) whole, or what it held before; no temporary file is left either way.

  The temporary name is this call's own (a fixed 'path.tmp' let two writers write one file); the file gets the
  mode mode_for(path) says, not mkstemp's 0600 (which hid a shared directory's records from its other users).
  Raises OSError when the directory cannot be written or the disk is full; the target is then as it was."""
  write_all_whole({path: data})


def write_all_whole(contents: dict) -> None:
  """Each path of `contents` ({path: bytes or str}) holds its data whole, or every one what it held before:
  the files of one result (a split's .src and .ref, a bench's results.json and hypotheses) are all written to
  temporary files first, then renamed, so that a full disk or a kill while writing never leaves a new file
  beside an old one (line i of the .src then another sentence's reference). Only the renames at the end, moments
  long, can be cut between two files."""
  staged = []  # (temporary, path), written and on disk
  try:
    for path, data in contents.items():
      if isinstance(data, str):
        data = data.encode('utf-8')
      directory = os.path.dirname(os.path.abspath(path))
      os.makedirs(directory, exist_ok=True)
      handle, temporary = tempfile.mkstemp(dir=directory, prefix='.' + os.path.basename(path) + '.',
                                           suffix='.partial')
      staged.append((temporary, path))
      with os.fdopen(handle, 'wb') as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())  # on disk before the rename: after a crash, the old file or the new, never an empty one
      os.chmod(temporary, mode_for(path))
    while staged:
      temporary, path = staged[0]
      os.replace(temporary, path)
      staged.pop(0)
  except BaseException:  # a full disk, a kill (its exception) or Ctrl-C: the temporary files go
    for temporary, _ in staged:
      try:
        os.remove(temporary)
      except OSError:
        pass
    raise
