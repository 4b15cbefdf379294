"""Every command the docs give names a tool, flags, files, configs and methods that exist today.

README.md and docs/*.md are read by people who copy their commands; a renamed flag or a removed script leaves a
command that fails with "Unknown command line flag" long after the change. This is a static check (no command
runs): each tool's flags are read from its source, where absl's DEFINE_* or argparse's add_argument names them,
`--config.x.y=` overrides are looked up in the config the command names, and bench methods are parsed. A code
block opening with `# at commit <hash>` is the record of code that is gone, run at that commit, and is left out.
"""

import importlib.util
import re
import shlex

from conftest import REPO

DOCS = [REPO / 'README.md', *sorted((REPO / 'docs').glob('*.md'))]

# The source files that define each tool's flags.
TOOL_SOURCES = {
    'train.py': 'fastmt/commands/train.py', 'fastmt-train': 'fastmt/commands/train.py',
    'decode.py': 'fastmt/commands/translate.py', 'fastmt-translate': 'fastmt/commands/translate.py',
    'fastmt-bench': 'fastmt/bench.py', 'fastmt-distill': 'fastmt/distill.py',
    'fastmt-clusters': 'fastmt/clusters_lib.py', 'fastmt-average': 'fastmt/checkpoint_average.py',
    'fastmt-export-split': 'fastmt/export_split.py',
}
ABSL_BUILTIN = {'help', 'helpfull', 'helpshort', 'flagfile'}


def _sources(tool):
  """The source file of a tool as a command names it (a script path, a module, a console script)."""
  if tool in TOOL_SOURCES:
    return REPO / TOOL_SOURCES[tool]
  if tool.endswith('.py'):
    return REPO / tool
  return REPO / (tool.replace('.', '/') + '.py')  # python -m fastmt.bench


def _defined_flags(source):
  text = source.read_text(encoding='utf-8')
  names = set(re.findall(r"DEFINE_\w+\(\s*'(\w+)'", text))
  names |= {n.replace('-', '_') for n in re.findall(r"add_argument\(\s*'--([\w-]+)'", text)}
  if 'define_checkpoint_flag' in text:
    names.add('checkpoint')
  if 'define_plugins_flag' in text:
    names.add('plugins')
  return names | ABSL_BUILTIN


def _code_lines(text):
  """Lines of fenced code blocks (continuations joined) and inline code spans, each a candidate command."""
  for block in re.findall(r'```[a-z]*\n(.*?)```', text, re.S):
    if re.match(r'# at commit [0-9a-f]{7}', block):  # a record of withdrawn code, run at that commit
      continue
    yield from re.sub(r'\\\n\s*', ' ', block).split('\n')
  yield from re.findall(r'`([^`\n]+)`', re.sub(r'```.*?```', '', text, flags=re.S))


def doc_commands():
  """(doc, tool, argv) for every invocation of a fastmt tool or benchmark script in the docs."""
  commands = []
  for doc in DOCS:
    for line in _code_lines(doc.read_text(encoding='utf-8')):
      for segment in re.split(r'\|\||&&|[|;#]', line):
        match = re.search(r'(?:\bpython3?\s+(?:-m\s+)?(\S+)|\b(fastmt-[a-z-]+))(.*)', segment)
        if not match:
          continue
        tool = match.group(1) or match.group(2)
        if not (tool in TOOL_SOURCES or tool.startswith('fastmt.') or tool.endswith('.py')):
          continue  # python -m venv, pip, `PY=.venv/bin/python RUNS=...` in prose
        try:
          argv = shlex.split(match.group(3))
        except ValueError:  # an unbalanced quote in prose
          argv = match.group(3).split()
        commands.append((doc.name, tool, argv))
  return commands


def _flag_names(argv):
  for arg in argv:
    match = re.match(r'--([A-Za-z_][\w.-]*)', arg)
    if match:
      yield match.group(1)


def _config(value):
  """A config named as the command names it (quickstart, configs/hrt.py:k2), or None for a placeholder
  (`--config X`, `<config>`); a config file the docs name that is not there fails the test here."""
  import configs  # pylint: disable=g-import-not-at-top
  name, _, variant = value.partition(':')
  path = configs.resolve_config_flag(['--config', name])[1]
  if not re.fullmatch(r'[\w/.]+\.py', path):
    return None
  assert (REPO / path).exists(), f'--config {value}: no such config file'
  spec = importlib.util.spec_from_file_location('doc_config', REPO / path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(variant) if variant else module.get_config()


def test_the_docs_give_commands_for_every_kind_of_tool():
  """The extraction finds what it checks: a regression in the parsing above would pass everything."""
  tools = {tool for _, tool, _ in doc_commands()}
  assert {'train.py', 'decode.py', 'fastmt.bench', 'fastmt-train', 'fastmt-translate'} <= tools, tools
  assert sum(tool.startswith('benchmarks/') for tool in tools) >= 10, tools


def test_every_tool_and_flag_in_the_docs_exists():
  problems = []
  for doc, tool, argv in doc_commands():
    source = _sources(tool)
    if not source.exists():
      problems.append(f'{doc}: {tool}: no such script or module ({source.relative_to(REPO)})')
      continue
    defined = _defined_flags(source)
    for name in _flag_names(argv):
      base = name.split('.')[0].replace('-', '_')
      if base not in defined and not (base.startswith('no') and base[2:] in defined):
        problems.append(f'{doc}: {tool} --{name}: no such flag in {source.relative_to(REPO)}')
  assert not problems, '\n'.join(problems)


def test_every_file_a_doc_names_exists():
  names = set()
  for doc in DOCS:
    names |= set(re.findall(r'(?<![\w/.])((?:benchmarks|configs|notebooks|fastmt|tests|docs)/[\w./-]+\.'
                            r'(?:py|sh|ipynb|md))\b', doc.read_text(encoding='utf-8')))
  assert len(names) > 20
  missing = sorted(n for n in names if not (REPO / n).exists())
  assert not missing, missing


def test_every_config_override_in_the_docs_names_a_field_of_its_config():
  import configs  # pylint: disable=g-import-not-at-top
  checked, problems = 0, []
  for doc, tool, argv in doc_commands():
    overrides = [n for n in _flag_names(argv) if n.startswith('config.')]
    value = configs.config_flag_value(argv)
    config = _config(value) if tool in ('train.py', 'fastmt-train') and overrides and value else None
    for name in overrides if config is not None else ():
      node = config
      for field in name.split('.')[1:]:
        if field not in node:
          problems.append(f'{doc}: --{name}: {value} has no field {field!r}')
          break
        node = node[field]
      checked += 1
  assert checked >= 5, checked  # the docs do override configs; finding none would mean the parsing broke
  assert not problems, '\n'.join(problems)


def _flag_values(argv, name):
  for i, arg in enumerate(argv):
    if arg.startswith(f'--{name}='):
      yield arg.split('=', 1)[1]
    elif arg == f'--{name}' and i + 1 < len(argv):
      yield argv[i + 1]


def test_every_method_and_algorithm_in_the_docs_parses():
  from fastmt import bench  # pylint: disable=g-import-not-at-top
  from fastmt.decoding import registry  # pylint: disable=g-import-not-at-top
  checked, problems = 0, []
  for doc, tool, argv in doc_commands():
    if tool in ('fastmt.bench', 'fastmt-bench', 'benchmarks/cpu_variants.py', 'benchmarks/step_profile.py'):
      for value in [*_flag_values(argv, 'methods'), *_flag_values(argv, 'algorithms')]:
        for method in value.split(','):
          checked += 1
          try:
            bench.parse_method(method, allow_auto=True)
          except Exception as error:  # pylint: disable=broad-except
            problems.append(f'{doc}: {tool} method {method!r}: {error}')
    if tool in ('decode.py', 'fastmt-translate'):
      for value in _flag_values(argv, 'algorithm'):
        checked += 1
        if value not in registry.ALGORITHMS and not _flag_values(argv, 'plugins'):  # --plugins: a user's own
          problems.append(f'{doc}: {tool} --algorithm {value}: not one of {sorted(registry.ALGORITHMS)}')
  assert checked >= 30, checked
  assert not problems, '\n'.join(problems)


def test_every_variable_a_doc_sets_for_a_benchmark_script_is_read_by_it():
  """`ROWS= STEPS=800 bash benchmarks/hrt.sh`: a variable the script no longer reads (renamed) is dropped without
  a word, and the run silently does something else. The environment of the programs it runs counts as read:
  fastmt's own variables (FASTMT_CACHE) and jax's."""
  fastmt_reads = ''.join(p.read_text(encoding='utf-8') for p in (REPO / 'fastmt').rglob('*.py'))
  checked, problems = 0, []
  for doc in DOCS:
    text = re.sub(r'\\\n\s*', ' ', doc.read_text(encoding='utf-8'))
    for match in re.finditer(r'((?:[A-Z_]{2,}=(?:"[^"]*"|\'[^\']*\'|\S*)\s+)+)bash (benchmarks/\w+\.sh)', text):
      script = REPO / match.group(2)
      read = script.read_text(encoding='utf-8') + (REPO / 'benchmarks' / 'lib.sh').read_text(encoding='utf-8')
      for name in re.findall(r'([A-Z_]{2,})=', re.sub(r'"[^"]*"|\'[^\']*\'', '', match.group(1))):
        checked += 1
        if not (re.search(rf'\b{name}\b', read) or name.startswith(('JAX_', 'XLA_'))
                or re.search(rf"environ(?:\.get\(|\[)'{name}'", fastmt_reads)):
          problems.append(f'{doc.name}: {match.group(2)} does not read {name}')
  assert checked >= 20, checked
  assert not problems, '\n'.join(problems)
