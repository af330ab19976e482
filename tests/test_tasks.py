"""Task specs: validation with clear errors, loading real data files through `datasets`, prompts."""
import textwrap

import pytest

from areal_core.errors import DatasetError, DuplicateNameError, TaskSpecError
from areal_core.plugins import reset_plugin_manager
from areal_core.tasks import task_registry
from areal_core.tasks import Task, load_task_yaml, task_spec_from_dict

GSM8K_SPEC = """
name: gsm8k-test
dataset: {path: gsm8k/test.jsonl}
fields:
  id: idx
  reference: {column: answer, regex: '####\\s*(.+)$', type: str}
prompt:
  messages:
    - {role: system, content: "Reason step by step."}
    - {role: user, content: "{{ question }}\\nPut the final answer in \\\\boxed{}."}
reward: {name: arithmetic}
eval: {n: 4, k: [1, 4], temperature: 0.6}
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture(autouse=True)
def fresh_registries():
    reset_plugin_manager()
    yield
    reset_plugin_manager()


def test_jsonl_task_maps_fields_with_regex_and_renders_chat_prompt(tmp_path, data_dir):
    spec = load_task_yaml(write(tmp_path, "gsm8k.yaml", GSM8K_SPEC))
    task = Task(spec, data_dir)
    samples = task.samples()
    assert len(samples) == 1319
    first = samples[0]
    assert first["id"] == "0" and first["reference"] == "18"
    assert "Janet" in first["question"] and first["answer"].endswith("#### 18")  # original columns kept
    assert all(s["reference"] and "####" not in s["reference"] for s in samples)
    messages = task.render_prompt(first)
    assert messages[0] == {"role": "system", "content": "Reason step by step."}
    assert messages[1]["role"] == "user"
    assert messages[1]["content"].startswith("Janet") and messages[1]["content"].endswith("\\boxed{}.")


@pytest.mark.parametrize("path, rows, id_column", [
    ("mbpp/sanitized-mbpp.json", 427, "task_id"),              # one JSON array
    ("humaneval/HumanEval.jsonl.gz", 164, "task_id"),          # gzip JSONL
    ("knights_and_knaves/3ppl/test.parquet", 100, None),       # parquet
    ("amc23/test.jsonl", 40, "id"),
])
def test_every_real_file_format_loads(tmp_path, data_dir, path, rows, id_column):
    fields = f"fields: {{id: {id_column}}}" if id_column else ""
    spec = load_task_yaml(write(tmp_path, "t.yaml", f"""
        name: t
        dataset: {{path: {path}}}
        {fields}
        prompt: {{template: "x"}}
        reward: {{name: arithmetic}}
    """))
    samples = Task(spec, data_dir).samples()
    assert len(samples) == rows
    assert len({s["id"] for s in samples}) == rows  # ids are unique


def test_mixed_answer_types_are_normalised_to_strings(tmp_path, data_dir):
    spec = load_task_yaml(write(tmp_path, "amc.yaml", """
        name: amc
        dataset: {path: amc23/test.jsonl}
        fields: {reference: {column: answer, type: str}}
        prompt: {template: "{{ problem }}"}
        reward: {name: arithmetic}
    """))
    samples = Task(spec, data_dir).samples()
    assert samples[0]["answer"] == 27.0 and samples[0]["reference"] == "27"
    assert all(isinstance(s["reference"], str) for s in samples)


@pytest.mark.parametrize("text, message", [
    ("name: t\ndataset: {path: x.jsonl\n", "not valid YAML"),
    ("- just\n- a list\n", "a task spec must be a mapping, got list"),
    ("name: t\ndataset: {path: x.jsonl}\nprompt: {template: x}\n", "reward: missing required key"),
    ("name: t\ndataset: {path: x.jsonl}\nprompt: {template: x}\nreward: {name: r}\ncolour: red\n",
     "colour: unknown key"),
    ("name: t\ndataset: {generator: g, size: ten}\nprompt: {template: x}\nreward: {name: r}\n",
     "dataset.size: expected int, got str 'ten'"),
    ("name: t\ndataset: {path: x.jsonl}\nprompt: {template: x, messages: []}\nreward: {name: r}\n",
     "prompt: a prompt has exactly one of: template, messages"),
    ("name: t\ndataset: {}\nprompt: {template: x}\nreward: {name: r}\n", "a dataset needs one of: path, hub, generator"),
    ("name: t\ndataset: {path: x.jsonl}\nprompt: {template: x}\nreward: {name: r}\neval: {n: 2, k: [4]}\n",
     "every k must be between 1 and n=2"),
    ("name: t\ndataset: {path: x.jsonl}\nfields: {reference: {column: a, regex: '(('}}\nprompt: {template: x}\nreward: {name: r}\n",
     "does not compile"),
    ("name: 'bad name!'\ndataset: {path: x.jsonl}\nprompt: {template: x}\nreward: {name: r}\n", "task name 'bad name!'"),
])
def test_malformed_task_yaml_is_a_clear_error_naming_file_and_key(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(TaskSpecError) as info:
        load_task_yaml(path)
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_malformed_task_yaml_reported_by_cli_without_traceback(areal, tmp_path):
    (tmp_path / "bad.yaml").write_text("name: t\ndataset: {generator: g, size: ten}\n")
    result = areal("--tasks-dir", str(tmp_path), "tasks")
    assert result.returncode == 2
    assert "bad.yaml" in result.stderr and "dataset.size: expected int" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_data_file_names_the_data_dir(tmp_path):
    spec = task_spec_from_dict({"name": "t", "dataset": {"path": "nowhere/test.jsonl"},
                                "prompt": {"template": "x"}, "reward": {"name": "r"}}, "test")
    with pytest.raises(DatasetError, match=r"nowhere/test.jsonl not found; set the data dir with --data-dir"):
        Task(spec, tmp_path).samples()


def test_malformed_row_is_an_error_naming_the_row_or_skipped_when_asked(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"q": "a", "ans": "1"}\n{"q": "b", "ans": "x"}\n{"q": "c", "ans": "3"}\n')
    base = {"name": "t", "dataset": {"path": "d.jsonl"}, "prompt": {"template": "{{ q }}"},
            "reward": {"name": "r"}, "fields": {"reference": {"column": "ans", "regex": r"^(\d+)$"}}}
    with pytest.raises(DatasetError, match=r"row 1 of .*d.jsonl: column 'ans' does not match"):
        Task(task_spec_from_dict(base, "t"), tmp_path).samples()
    skipping = dict(base, dataset={"path": "d.jsonl", "on_bad_row": "skip"})
    task = Task(task_spec_from_dict(skipping, "t"), tmp_path)
    with pytest.warns(UserWarning, match="skipped 1 malformed rows"):
        samples = task.samples()
    assert [s["reference"] for s in samples] == ["1", "3"]
    assert len(task.skipped_rows) == 1


def test_prompt_using_a_missing_field_is_an_error_not_blank_text(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"q": "a"}\n')
    spec = task_spec_from_dict({"name": "t", "dataset": {"path": "d.jsonl"}, "prompt": {"template": "{{ question }}"},
                                "reward": {"name": "r"}}, "t")
    task = Task(spec, tmp_path)
    with pytest.raises(TaskSpecError, match="undefined field.*'question' is undefined.*sample fields: id, q"):
        task.render_prompt(task.samples()[0])


def test_a_row_missing_a_column_the_prompt_prints_is_a_bad_row_not_the_text_none(tmp_path):
    """JSON rows are read with one schema: a row without a column the others have gets null, which the
    prompt would print as "None"."""
    (tmp_path / "d.jsonl").write_text('{"q": "a", "hint": "h"}\n{"other": 1}\n{"q": "c"}\n')
    base = {"name": "t", "dataset": {"path": "d.jsonl"}, "reward": {"name": "r"},
            "prompt": {"template": "{{ q }}{% if hint %} (hint: {{ hint }}){% endif %}"}}
    with pytest.raises(DatasetError, match=r"row 1 of .*d.jsonl: the prompt prints the empty \(missing or null\) "
                                           r"field 'q', which would read \"None\""):
        Task(task_spec_from_dict(base, "t"), tmp_path).samples()
    task = Task(task_spec_from_dict(dict(base, dataset={"path": "d.jsonl", "on_bad_row": "skip"}), "t"), tmp_path)
    with pytest.warns(UserWarning, match="skipped 1 malformed rows"):
        samples = task.samples()
    # An empty field the prompt only tests (`hint` of row 2) is fine.
    assert [task.render_prompt(s) for s in samples] == ["a (hint: h)", "c"]


def test_a_dataset_whose_every_row_is_skipped_is_an_error_not_an_empty_task(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"q": null}\n{"q": null}\n')
    spec = task_spec_from_dict({"name": "t", "dataset": {"path": "d.jsonl", "on_bad_row": "skip"}, "reward": {"name": "r"},
                                "prompt": {"template": "{{ q }}"}}, "t")
    with pytest.raises(DatasetError, match=r"every row of .*d.jsonl is malformed \(2 skipped\); first: .*row 0"):
        Task(spec, tmp_path).samples()


def test_same_task_name_in_two_files_is_an_error_naming_both(tmp_path):
    for sub in ("one", "two"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "t.yaml").write_text("name: twin\ndataset: {path: x.jsonl}\nprompt: {template: x}\nreward: {name: r}\n")
    with pytest.raises(DuplicateNameError, match=r"task 'twin' is registered twice: by file .*one/t.yaml and by file .*two/t.yaml"):
        task_registry([tmp_path / "one", tmp_path / "two"])


def test_generated_arithmetic_task_is_deterministic_and_heldout_is_disjoint():
    registry = task_registry()
    train = Task(registry.get("arithmetic")).samples()
    test = Task(registry.get("arithmetic-test")).samples()
    assert len(train) == 20000 and len(test) == 500
    assert train[:5] == Task(registry.get("arithmetic")).samples()[:5]
    assert not {s["id"] for s in train} & {s["id"] for s in test}
    a, b = test[0]["question"].rstrip("=").split("+")
    assert len(a) == len(b) == 3  # zero-padded operands
    assert test[0]["reference"] == str(int(a) + int(b)).zfill(4)[::-1]


def test_longtail_arithmetic_has_long_tailed_answer_lengths_and_distinct_heldout_problems():
    registry = task_registry()
    train = Task(registry.get("arithmetic-longtail")).samples()
    test = Task(registry.get("arithmetic-longtail-test")).samples()
    lengths = sorted(len(s["reference"]) for s in train)
    assert lengths[len(lengths) // 2] <= 4 and lengths[-1] >= 12  # median short, tail long
    assert len({s["id"] for s in test}) == len(test) == 500
    assert not {s["id"] for s in train} & {s["id"] for s in test}
    for sample in test[:50]:
        a, b = sample["question"].rstrip("=").split("+")
        assert len(a) == len(b) and sample["reference"] == str(int(a) + int(b)).zfill(len(a) + 1)[::-1]


def test_tasks_cli_lists_tasks_and_shows_first_prompt(areal, tmp_path, data_dir):
    write(tmp_path, "gsm8k.yaml", GSM8K_SPEC)
    listing = areal("--data-dir", str(data_dir), "--tasks-dir", str(tmp_path), "tasks", "--json")
    assert listing.returncode == 0, listing.stderr
    import json

    rows = {r["name"]: r for r in json.loads(listing.stdout)}
    assert rows["gsm8k-test"]["size"] == 1319 and rows["gsm8k-test"]["reward"] == "arithmetic"
    assert rows["arithmetic-test"]["source"] == "plugin 'arithmetic'"
    shown = areal("--data-dir", str(data_dir), "--tasks-dir", str(tmp_path), "tasks", "show", "gsm8k-test")
    assert shown.returncode == 0, shown.stderr
    assert "1319 samples" in shown.stdout and "[user]\nJanet" in shown.stdout


def test_a_generator_that_yields_nothing_is_an_error_naming_it(plugin_dirs, monkeypatch):
    """Not an empty task that a training run would wait on forever."""
    from areal_core.plugins import reset_plugin_manager

    monkeypatch.syspath_prepend(str(plugin_dirs["testkit"]))
    monkeypatch.setenv("AREAL_PLUGINS", "testkit")
    reset_plugin_manager()
    try:
        spec = task_spec_from_dict({"name": "silent", "dataset": {"generator": "shout", "size": 5, "options": {"words": []}},
                                    "prompt": {"template": "Say {{ word }}"}, "reward": {"name": "shout"}}, "silent")
        with pytest.raises(DatasetError, match=r"task 'silent': generator shout \(seed 0, size 5\) has no rows"):
            Task(spec).samples()
    finally:
        reset_plugin_manager()


def test_naming_the_plugin_of_a_reward_changes_neither_the_task_identity_nor_the_printed_reward_name():
    """`reward.plugin` only says what to install: evals already stored and cached warm-ups stay valid."""
    base = {"name": "t", "dataset": {"generator": "g", "size": 1}, "prompt": {"template": "x"},
            "reward": {"name": "math", "options": {"k": 1}}}
    named = task_spec_from_dict({**base, "reward": {**base["reward"], "plugin": "areal-math"}}, "t")
    plain = task_spec_from_dict(base, "t")
    assert named.content() == plain.content() == plain.to_dict()
    assert named.to_dict()["reward"] == {"name": "math", "options": {"k": 1}, "plugin": "areal-math"}


def test_grading_modes_default_to_strict_for_training_and_lenient_for_evals():
    from areal_core.errors import ConfigError
    from areal_core.rewards.registry import graded_options
    from areal_core.tasks import get_task

    math500 = get_task("math500").spec.reward
    assert (math500.mode_for("train"), math500.mode_for("eval")) == ("strict", "lenient")
    assert graded_options("math", math500.options, math500.mode_for("train")) == ({"extract": "strict"}, "strict")
    # the task's and the command line's options win over the mode's
    assert graded_options("math", {"extract": "none"}, "lenient", {"rel_tol": 0.01}) == (
        {"extract": "none", "rel_tol": 0.01}, "custom")  # recorded as what it is: neither mode
    assert graded_options("math", {}, "lenient", {"extract": "strict"}) == ({"extract": "strict"}, "strict")
    # the logic rewards read only the <answer> block in training, also a box or the text after </think> in evals
    assert graded_options("countdown", {}, "strict") == ({"extract": "answer_tag"}, "strict")
    assert graded_options("countdown", {}, "lenient") == ({"extract": "auto"}, "lenient")
    # a reward without modes is graded one way, whatever the use
    assert graded_options("arithmetic", {}, "strict") == ({}, None)
    with pytest.raises(ConfigError, match="reward 'math' has no grading mode 'loose' \\(it has: strict, lenient\\)"):
        graded_options("math", {}, "loose")


def test_a_task_spec_chooses_its_grading_modes(tmp_path):
    base = {"name": "t", "dataset": {"path": "x/test.jsonl"}, "prompt": {"template": "{{ q }}"}}
    spec = task_spec_from_dict({**base, "reward": {"name": "math", "modes": {"eval": "strict"}}}, "t")
    assert (spec.reward.mode_for("train"), spec.reward.mode_for("eval")) == ("strict", "strict")
    with pytest.raises(TaskSpecError, match="reward.modes: unknown use\\(s\\) score; expected train and/or eval"):
        task_spec_from_dict({**base, "reward": {"name": "math", "modes": {"score": "strict"}}}, "t")


def test_a_misspelt_grading_mode_fails_when_the_task_is_loaded_naming_it(tmp_path):
    from areal_core.tasks import get_task

    (tmp_path / "typo.yaml").write_text(textwrap.dedent("""\
        name: typo
        dataset: {path: math500/test.jsonl}
        fields: {question: problem, reference: answer}
        prompt: {template: "{{ question }}"}
        reward: {name: math, modes: {eval: lenent}}
    """))
    reset_plugin_manager()
    with pytest.raises(TaskSpecError, match="task 'typo' .*reward.modes.eval='lenent': reward 'math' has modes strict, lenient"):
        get_task("typo", tasks_dirs=(str(tmp_path),))
