r"""Translates a file (or stdin) with a trained fastmt model, in input order (same as `fastmt-translate`).

    python decode.py --workdir runs/quickstart --input src.txt --output hyp.txt --reference ref.txt \
        --algorithm pgj --block_size 3 --metrics_json metrics.json
    echo "In the beginning God created the heavens and the earth." | python decode.py --workdir runs/quickstart

The flags and what they do: fastmt/commands/translate.py.
"""

from fastmt.commands import translate

if __name__ == '__main__':
  translate.run()
