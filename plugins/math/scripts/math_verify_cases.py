"""Regenerate tests/math/data/math_verify_cases.json from math-verify's own regression suite.

    python plugins/math/scripts/math_verify_cases.py PATH/TO/Math-Verify [--commit HASH]

Reads `tests/test_all.py` of a checkout of https://github.com/huggingface/Math-Verify (MIT licence,
Copyright (c) 2024 The HuggingFace Team; see tests/math/data/README.md) without running it: every
``@pytest.mark.parametrize("gold,pred,expected", [...])`` list is read with `ast.literal_eval`. Kept:
every literal (gold, pred, expected) triple, once, except those whose verdict depends on
math-verify's `allow_set_relation_comp` switch (a `precision` column is dropped: our tolerance
rules apply), duplicates once: 180 triples at commit 5d148cf. Each gold becomes
a reference the way a data set stores one (`reference_of`): its last ``\\boxed{}``, else the text
with `$` stripped (a whole solution without a box: its final answer).
"""
from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
OUTPUT = REPO / "tests" / "math" / "data" / "math_verify_cases.json"
sys.path.insert(0, str(REPO / "plugins" / "math"))


def reference_of(gold: str) -> str:
    """The reference a data set would store for `gold`: its last box; for a gold that is a whole
    solution without one (math-verify parses golds like predictions), its final answer as lenient
    extraction reads it; else the text without `$`."""
    from areal_math.extract import extract_answer, find_boxes

    boxes = find_boxes(gold)
    if boxes:
        return boxes[-1][2].strip()
    stripped = gold.strip().strip("$").strip()
    if len(stripped) > 80:
        found = extract_answer(gold, "lenient").answer
        if found:
            return found
    return stripped


def cases(source: str) -> list[dict]:
    found = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            if not (isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("parametrize")):
                continue
            names = ast.literal_eval(decorator.args[0])
            fields = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
            if fields[:3] != ["gold", "pred", "expected"] or "allow_set_relation_comp" in fields:
                continue  # the expected verdict depends on a set-relation switch of math-verify's
            for index, element in enumerate(decorator.args[1].elts):
                try:
                    gold, pred, expected = ast.literal_eval(element)[:3]  # a `precision` column is dropped
                except ValueError:
                    continue  # a row built by code (an f-string): not a plain case
                if any(c["gold"] == gold and c["pred"] == pred for c in found):
                    continue
                found.append({"id": f"{node.name}[{index}]", "gold": gold, "pred": pred,
                              "reference": reference_of(gold), "expected": int(bool(expected))})
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkout", type=Path, help="a checkout of huggingface/Math-Verify")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    source = (args.checkout / "tests" / "test_all.py").read_text()
    commit = subprocess.run(["git", "-C", str(args.checkout), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    rows = cases(source)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    payload = {"source": "https://github.com/huggingface/Math-Verify/blob/main/tests/test_all.py",
               "commit": commit, "licence": "MIT, Copyright (c) 2024 The HuggingFace Team", "cases": rows}
    args.output.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(rows)} cases ({sum(r['expected'] for r in rows)} equal, "
          f"{sum(1 - r['expected'] for r in rows)} different) from commit {commit[:12]} -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
