"""areal-logic: logic puzzles with seeded generators, exact solvers and verifiers (no model, no judge).

Families, each a module with ``generate`` (seeded, with difficulty knobs), a solver, an answer parser and
``reward``: `knights_knaves`, `countdown`, `sudoku`, `zebra`. The rewards are registered under those
names; the generators too. Tasks: the Logic-RL Knights-and-Knaves test sets (``knights_knaves_3ppl`` ..
``knights_knaves_7ppl``, read from ``knights_and_knaves/{N}ppl/test.parquet`` under the data dir) and a
train / held-out test pair of generated tasks per family (train and test puzzles never overlap: a stable
hash assigns each puzzle to one split). Scoring options shared by all rewards are described in `areal_logic.answers`; each family's
module docstring documents how its answers are read and scored. Grading modes: ``strict`` (training) reads
only the <answer> block, ``lenient`` (evals) also a box or the text after </think>. `areal_logic.audit`
holds the mutators `areal audit` fuzzes the four rewards with.
"""
from __future__ import annotations

from typing import Any

from areal_core import hookimpl

from areal_logic import countdown, knights_knaves, sudoku, zebra

__version__ = "0.1.0"

KK_PROMPT = (
    "{{ quiz }}\n\n"
    "Reason step by step inside <think> </think> tags, then state the identity of every inhabitant inside "
    "<answer> </answer> tags, one per line, like:\n<answer>\n(1) Name is a knight\n(2) Name is a knave\n</answer>"
)
COUNTDOWN_PROMPT = (
    "Using the numbers {{ numbers | join(', ') }}, write an arithmetic expression that equals {{ target }}. "
    "You may use +, -, *, / and parentheses; "
    "{% if use_all_numbers %}use every number exactly once{% else %}use each number at most once{% endif %}.\n\n"
    "Reason inside <think> </think> tags, then give only the expression inside <answer> </answer> tags, "
    "for example <answer>(1 + 2) * 3</answer>."
)
SUDOKU_PROMPT = (
    "Solve this {{ size }}x{{ size }} Sudoku. Fill the empty cells (shown as .) so that every row, every column "
    "and every {{ box }} box holds each digit from 1 to {{ size }} exactly once.\n\n{{ grid }}\n\n"
    "Reason inside <think> </think> tags, then give the completed grid inside <answer> </answer> tags, "
    "one row per line, digits separated by spaces."
)
ZEBRA_PROMPT = (
    "{{ puzzle }}\n\n"
    "Reason inside <think> </think> tags, then give the full solution inside <answer> </answer> tags, "
    "one line per house, like:\n<answer>\n{{ example }}\n</answer>"
)


# Training reads only the <answer> block the prompts ask for (an answer elsewhere is a format the policy
# must not learn to rely on); evals also read a box or the text after </think>.
MODES = {"strict": {"extract": "answer_tag"}, "lenient": {"extract": "auto"}}


@hookimpl
def register_rewards(register):
    register("knights_knaves", knights_knaves.reward, required_fields=("names", "solution"), modes=MODES,
             description="Knights and Knaves: every person's role as in `solution` (list of bool, true = knight).")
    register("countdown", countdown.reward, required_fields=("numbers", "target"), modes=MODES,
             description="Countdown: an expression over `numbers` with + - * / () equal to `target`, parsed without eval.")
    register("sudoku", sudoku.reward, required_fields=("puzzle",), modes=MODES,
             description="Sudoku 4x4/9x9: a complete grid that keeps the givens of `puzzle` and obeys the rules.")
    register("zebra", zebra.reward, required_fields=("solution",), modes=MODES,
             description="Zebra/Einstein puzzle: every attribute value in its house, as in `solution`.")


@hookimpl
def register_audit_mutators(register):
    from areal_logic import audit

    for name, mutator in audit.MUTATORS.items():
        register(name, mutator, description=f"hedges, several answers, near misses and equivalent forms of {name} answers")


@hookimpl
def register_generators(register):
    register("knights_knaves", knights_knaves.generate)
    register("countdown", countdown.generate)
    register("sudoku", sudoku.generate)
    register("zebra", zebra.generate)


def _generated(name: str, description: str, generator: str, template: str, size: int, options: dict[str, Any],
               max_new_tokens: int) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "dataset": {"generator": generator, "seed": 0, "size": size, "options": options},
        "prompt": {"messages": [{"role": "user", "content": template}]},
        "reward": {"name": generator},
        "eval": {"n": 1, "k": [1], "temperature": 0.0, "max_new_tokens": max_new_tokens},
    }


def generated_tasks() -> list[dict[str, Any]]:
    """Train / held-out pairs of generated puzzles, sized so that listing them stays quick."""
    specs = []
    families = [
        ("knights_knaves", "Knights and Knaves, 3-7 people", "knights_knaves", KK_PROMPT,
         {"people": [3, 7], "depth": 1, "width": 2}, 2000, 500, 4096),
        ("countdown", "Countdown, 3-4 numbers up to 100, each used at most once", "countdown", COUNTDOWN_PROMPT,
         {"count": [3, 4], "max_number": 100, "min_target": 10, "max_target": 1000}, 2000, 500, 2048),
        ("sudoku_4x4", "Sudoku 4x4 with 6 givens", "sudoku", SUDOKU_PROMPT, {"grid_size": 4, "clues": 6}, 2000, 500, 2048),
        ("sudoku_9x9", "Sudoku 9x9 with about 30 givens", "sudoku", SUDOKU_PROMPT, {"grid_size": 9, "clues": 30},
         100, 100, 8192),
        ("zebra", "Zebra puzzles, 4 houses x 3 attributes, minimal clue sets", "zebra", ZEBRA_PROMPT,
         {"houses": 4, "attributes": 3}, 500, 200, 4096),
    ]
    for name, description, generator, template, options, train_size, test_size, tokens in families:
        specs.append(_generated(name, f"{description} (generated, training split)", generator, template, train_size,
                                {**options, "split": "train"}, tokens))
        specs.append(_generated(f"{name}-test", f"{description} (generated, held-out split)", generator, template,
                                test_size, {**options, "split": "test"}, tokens))
    return specs


def logic_rl_tasks() -> list[dict[str, Any]]:
    """The Logic-RL K&K test sets (100 puzzles each), with the same prompt as the generated K&K tasks."""
    return [{
        "name": f"knights_knaves_{n}ppl",
        "description": f"Knights and Knaves, {n} people: the Logic-RL test set (Unakar/Logic-RL data/kk/instruct)",
        "dataset": {"path": f"knights_and_knaves/{n}ppl/test.parquet"},
        "fields": {"id": "index"},
        "prompt": {"messages": [{"role": "user", "content": KK_PROMPT}]},
        "reward": {"name": "knights_knaves"},
        "eval": {"n": 1, "k": [1], "temperature": 0.0, "max_new_tokens": 4096},
    } for n in range(3, 8)]


@hookimpl
def register_tasks(register):
    for spec in logic_rl_tasks() + generated_tasks():
        register(spec)
