"""Response lengths for `areal plan --lengths` (plan/workload.py): a real `areal train` run logs each step's lengths
and a workload drawn from its directory gives them back; a file of responses is counted by the tokenizer; a file of
lengths is taken as it is; the log-normal tail draws as the sampled_lengths workflow does; a simulated run's responses
are the workload's draws cut at max_new_tokens; bad input is an error naming the file and what was expected."""
from __future__ import annotations

import json
import math
import random
import zlib
from collections import Counter

import pytest
import yaml
from click.testing import CliRunner

from areal_core.cli import cli
from areal_core.engine.model import build_char_tokenizer
from areal_core.errors import ConfigError
from areal_core.eval.records import EvalSample
from areal_core.plan.workload import load_workload
from areal_core.rl.run import LENGTH_HISTOGRAM_BINS, length_distribution, length_prompt_share
from areal_core.workflows.builtin import lognormal_parameters, sampled_length
from tests.conftest import run_areal

from tests.plan.test_plan_command import PROFILE

RIDS = [f"p{n}.{i}" for n in range(5000) for i in range(4)]   # the request ids a rollout gives its episodes


def pooled_quantile(counts: Counter, p: float) -> int:
    """The smallest length with at least p of the responses at or below it."""
    total, seen = sum(counts.values()), 0
    for tokens in sorted(counts):
        seen += counts[tokens]
        if seen >= p * total:
            return tokens
    raise AssertionError("unreachable")


def total_variation(a: Counter, b: Counter) -> float:
    na, nb = sum(a.values()), sum(b.values())
    return sum(abs(a[k] / na - b[k] / nb) for k in set(a) | set(b)) / 2


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A real 3-step `areal train` on the embedded model, no warm-up: its untrained policy stops anywhere up to 48
    tokens, so its lengths spread."""
    out = tmp_path_factory.mktemp("train")
    result = run_areal("train", "steps=3", "warmup.enabled=false", "eval_task=null", "rollout.batch_size=8",
                   "rollout.group_size=4", "rollout.max_new_tokens=48", "tensorboard=false", f"output_dir={out}",
                   "name=lengths")
    assert result.returncode == 0, result.stderr
    (found,) = out.glob("lengths-*")
    return found


def test_a_run_logs_each_steps_lengths_and_its_workload_draws_them_back_pooled(run_dir):
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    pooled: Counter = Counter()
    for step in steps:   # the new metric agrees with the step's other counts of its responses
        hist = step["response_length_hist"]
        assert sum(c for _, c in hist) == step["responses"] == 32
        assert sum(t * c for t, c in hist) == step["response_tokens"]
        assert all(1 <= t <= 48 for t, _ in hist) and len(hist) <= LENGTH_HISTOGRAM_BINS
        pooled.update({t: c for t, c in hist})
    assert len(pooled) > 3   # lengths spread: the test can tell distributions apart

    workload = load_workload(run_dir)
    summary = workload.summary()
    assert summary["responses"] == 96 and summary["kind"] == "run"
    assert summary["mean"] == pytest.approx(sum(s["response_tokens"] for s in steps) / 96)
    assert summary["max"] == max(pooled) and summary["p99"] == pooled_quantile(pooled, 0.99)
    assert [workload.quantile(p) for p in (0.1, 0.5, 0.9)] == [pooled_quantile(pooled, p) for p in (0.1, 0.5, 0.9)]

    drawn = Counter(workload(rid, 10, 48) for rid in RIDS)
    assert set(drawn) <= set(pooled) and total_variation(drawn, pooled) < 0.03
    # the same request gets the same length, from the same run loaded again; a shorter budget cuts it
    again = load_workload(run_dir / "metrics.jsonl")
    assert [again(rid, 10, 48) for rid in RIDS[:200]] == [workload(rid, 10, 48) for rid in RIDS[:200]]
    assert [workload(rid, 10, 20) for rid in RIDS[:200]] == [min(workload(rid, 10, 48), 20) for rid in RIDS[:200]]
    assert load_workload(run_dir, seed=1)("p0.0", 10, 48) in pooled


def test_many_distinct_lengths_are_logged_as_quantiles_in_a_short_line_and_drawn_back_pooled(tmp_path):
    rng = random.Random(0)
    short = [max(1, round(rng.lognormvariate(6, 0.8))) for _ in range(8192)]
    long = [max(1, round(rng.lognormvariate(8, 1.0))) for _ in range(4096)]
    assert length_distribution([5, 5, 7]) == {"response_length_hist": [[5, 2], [7, 1]]}
    lines = []
    for step, lengths in enumerate((short, long), 1):
        logged = length_distribution(lengths)
        assert set(logged) == {"response_length_quantiles"}
        lines.append(json.dumps({"step": step, "responses": len(lengths), **logged}))
    assert max(map(len, lines)) < 2000   # one line of JSONL, at 8,192 responses a step
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")

    workload = load_workload(tmp_path)
    pooled = sorted(short + long)
    summary = workload.summary()
    assert summary["responses"] == len(pooled) and summary["max"] == pooled[-1]
    assert summary["mean"] == pytest.approx(sum(pooled) / len(pooled), rel=0.01)
    assert summary["p99"] == pytest.approx(pooled[int(0.99 * len(pooled))], rel=0.02)
    drawn = sorted(workload(rid, 10, 10 ** 6) for rid in RIDS)
    for p in (0.1, 0.5, 0.9, 0.99):
        assert drawn[int(p * len(drawn))] == pytest.approx(pooled[int(p * len(pooled))], rel=0.06), p
    assert max(workload(rid, 10, 1000) for rid in RIDS[:2000]) == 1000


def test_a_file_of_responses_is_counted_in_the_tokenizers_tokens(tmp_path):
    tokenizer = build_char_tokenizer()   # one token a character
    rows = [{"response": "12+7=19"}, {"completion": "abc"}, {"output": "x" * 40, "score": 1}, "plain text",
            EvalSample("p0", 0, 0, "0341", 1.0, True).to_dict(),   # `areal eval`'s samples.jsonl rows
            EvalSample("p1", 1, 0, "done", 0.0, False, transcript=[
                {"role": "assistant", "start": 0, "end": 12, "tokens": 12, "text": "..."},
                {"role": "tool", "start": 12, "end": 15, "tokens": 3, "text": "42"},
                {"role": "assistant", "start": 15, "end": 20, "tokens": 5, "text": "done"}]).to_dict()]
    path = tmp_path / "responses.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    expected = Counter([7, 3, 40, 10, 4, 12, 5])   # a transcript: each policy turn, tool output not counted
    workload = load_workload(path, tokenizer)
    assert workload.summary() == {"source": str(path), "kind": "responses", "responses": 7,
                                  "mean": pytest.approx(sum(expected.elements()) / 7), "p99": 40, "max": 40,
                                  "prompt_share": 0.0}
    assert Counter(workload(rid, 1, 100) for rid in RIDS[:4000]).keys() == expected.keys()
    # a JSON list, and a directory of `areal eval` results, read alike
    (tmp_path / "list.json").write_text(json.dumps(rows))
    assert load_workload(tmp_path / "list.json", tokenizer).summary()["mean"] == workload.summary()["mean"]
    (tmp_path / "evals" / "replay").mkdir(parents=True)
    (tmp_path / "evals" / "replay" / "arithmetic.samples.jsonl").write_text(path.read_text())
    assert load_workload(tmp_path / "evals", tokenizer).summary()["responses"] == 7


def test_a_file_of_whole_numbers_is_lengths_as_they_are_and_a_draw_is_cut_at_max_new_tokens(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("3\n5\n5\n\n900\n")
    workload = load_workload(path)
    assert workload.summary(max_new_tokens=100) == {
        "source": str(path), "kind": "responses", "responses": 4, "mean": 228.25, "p99": 900, "max": 900,
        "prompt_share": 0.0, "cut_fraction": 0.25}
    drawn = Counter(workload(rid, 1, 100) for rid in RIDS[:8000])
    assert set(drawn) == {3, 5, 100} and drawn[5] / 8000 == pytest.approx(0.5, abs=0.03)


def test_the_long_tail_draws_as_the_sampled_lengths_workflow_and_has_its_mean_and_p99():
    workload = load_workload("mean=2000,p99=7000,max=32768")
    options = {"lengths": {"mean": 2000, "p99": 7000, "max": 32768}, "seed": 0}
    assert [workload(rid, 1, 32768) for rid in RIDS[:500]] == [sampled_length(options, rid, 32768) for rid in RIDS[:500]]
    drawn = sorted(workload(rid, 1, 32768) for rid in RIDS)
    assert sum(drawn) / len(drawn) == pytest.approx(2000, rel=0.04)
    assert drawn[int(0.99 * len(drawn))] == pytest.approx(7000, rel=0.08)
    summary = workload.summary(max_new_tokens=4096)
    assert (summary["mean"], summary["p99"], summary["max"]) == (2000, 7000, 32768)
    assert summary["cut_fraction"] == pytest.approx(sum(d > 4096 for d in drawn) / len(drawn), abs=0.01)
    assert max(workload(rid, 1, 4096) for rid in RIDS) == 4096


@pytest.mark.parametrize("name, content, message", [
    ("missing.jsonl", None, "missing.jsonl: no such file or directory; expected a run directory"),
    ("empty.jsonl", "\n\n", "empty.jsonl: no responses or lengths in it"),
    ("broken.jsonl", '{"response": "ok"}\n{"response": \n', r"broken.jsonl:2: not a JSON value"),
    ("keys.jsonl", '{"answer": "x"}\n', r"keys.jsonl:1: expected a response .* got an object with keys \['answer'\]"),
    ("negative.txt", "4\n-2\n", r"negative.txt:2: expected a response .* or a whole number of tokens >= 1, got -2"),
    ("list.json", '[1, 2', "list.json: not valid JSON"),
    ("run/metrics.jsonl", '{"step": 1, "response_length_mean": 12.5}\n',
     "metrics.jsonl: no step logs response_length_hist or response_length_quantiles"),
    ("run/metrics.jsonl", '{"step": 1, "response_length_hist": [[3, "x"]]}\n',
     r"metrics.jsonl:1: response_length_hist must be \[\[tokens, count\], ...\]"),
    ("run/metrics.jsonl", '{"step": 1, "response_length_quantiles": [[0, 3], [1, 9]]}\n',
     "metrics.jsonl:1: response_length_quantiles needs the step's responses"),
    ("nothing/", None, "nothing: a directory with neither a metrics.jsonl"),
])
def test_bad_lengths_are_an_error_naming_the_file_and_what_was_expected(tmp_path, name, content, message):
    path = tmp_path / name
    if name.endswith("/"):
        path.mkdir()
    elif content is not None:
        path.parent.mkdir(exist_ok=True)
        path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_workload(path, build_char_tokenizer())


@pytest.mark.parametrize("source, message", [
    ("mean=abc", "mean must be a number of tokens, got 'abc'"),
    ("p99=7000", r"expected mean=N,p99=N,max=N \(the mean at least\)"),
    ("mean=2000,p99=100", "a log-normal needs mean <= p99"),
    ("mean=2000,median=3", "got 'median'"),
    ("mean=2000,prompt_share=1.5", r"prompt_share must be in \[0, 1\]"),
])
def test_a_bad_long_tail_is_an_error_saying_what_was_expected(source, message):
    with pytest.raises(ConfigError, match=message):
        load_workload(source)


def test_areal_plan_lengths_from_a_run_every_simulated_response_is_its_draw_cut_at_max_new_tokens(tmp_path, run_dir):
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(PROFILE))
    run = ["task=arithmetic", "steps=3", "rollout.batch_size=8", "rollout.group_size=4", "rollout.max_new_tokens=40"]
    areal = CliRunner()   # in-process: the command as `areal` runs it, errors included
    result = areal.invoke(cli, ["plan", str(profile), "--gpus", "2", "--eta", "0", "--lengths", str(run_dir),
                                "--output", str(tmp_path / "plan"), *run])
    assert result.exit_code == 0, result.output
    workload = load_workload(run_dir)
    summary = workload.summary(max_new_tokens=40)
    assert f"workload: the responses of run {run_dir} (96 responses): mean {summary['mean']:,.0f} tokens" in result.output
    report = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert report["workload"]["cut_fraction"] == pytest.approx(summary["cut_fraction"])
    assert report["workload"]["max_new_tokens"] == 40
    # the synchronous simulation: each request's response is exactly the workload's draw for its id, cut at 40
    steps = [json.loads(line) for line in (tmp_path / "plan" / "runs" / "000" / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 3
    for step in steps:
        expected = Counter(min(workload(f"p{n}.{i}", 0, 40), 40) for n in step["prompts"] for i in range(4))
        assert Counter({t: c for t, c in step["response_length_hist"]}) == expected

    refused = areal.invoke(cli, ["plan", str(profile), "--gpus", "2", "--eta", "0", "--lengths", "mean=20",
                                 "rollout.workflow=sampled_lengths", "rollout.workflow_options={lengths: {mean: 10}}",
                                 "--output", str(tmp_path / "refused"), *run])
    assert refused.exit_code == 2 and "sampled_lengths workflow sets every response's length itself" in refused.output
    missing = areal.invoke(cli, ["plan", str(profile), "--gpus", "2", "--lengths", str(tmp_path / "nope.jsonl"), *run])
    assert missing.exit_code == 2 and f"error: lengths {tmp_path / 'nope.jsonl'}: no such file" in missing.output


def test_a_runs_rewards_come_with_its_lengths_and_reproduce_its_share_of_uniform_groups(tmp_path, run_dir):
    from areal_core.plan.trainer import RewardCosts

    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rewards = load_workload(run_dir).rewards
    assert rewards["correct_rate"] == pytest.approx(sum(s["reward_mean"] for s in steps) / len(steps))
    # what its step loop trained on, for a profile's training steps beside generation
    trained = load_workload(run_dir).trained_share
    assert 0 < trained <= 1 and trained == pytest.approx(sum(s["trained_sequences"] for s in steps)
                                                  / sum(s["responses"] for s in steps))
    # and how long its trained sequences ran against its batch's (prompt and response tokens, each step logs both)
    for s in steps:
        assert s["batch_tokens"] > s["response_tokens"] and (s["batch_tokens"] - s["response_tokens"]) % 4 == 0
        assert 0 < s["trained_tokens"] <= s["batch_tokens"]
        assert (s["trained_tokens"] == s["batch_tokens"]) == (s["trained_sequences"] == s["responses"])
        # and the lengths of what it trained: the simulated trainer trains sequences of these
        for name in ("trained_prompt_length_hist", "trained_response_length_hist"):
            assert sum(count for _, count in s[name]) == s["trained_sequences"]
        assert sum(t * c for t, c in s["trained_prompt_length_hist"] + s["trained_response_length_hist"]) \
            == s["trained_tokens"]
    trained_lengths = load_workload(run_dir).trained_lengths
    sequences = sum(s["trained_sequences"] for s in steps)
    assert trained_lengths.prompts.mean == pytest.approx(
        sum(t * c for s in steps for t, c in s["trained_prompt_length_hist"]) / sequences)
    assert trained_lengths.mean == pytest.approx(sum(s["trained_tokens"] for s in steps) / sequences)
    # drawn as the simulated reward model draws them, groups of the run's size (4) are mixed as often as the run's
    costs = RewardCosts(**rewards)
    groups = [{costs.draw(f"p{g}.{i}")[1] for i in range(4)} for g in range(4000)]
    mixed = sum(len(group) == 2 for group in groups) / len(groups)
    assert mixed == pytest.approx(sum(s["mixed_group_fraction"] for s in steps) / len(steps), abs=0.04)
    # areal plan takes them with the lengths and says so
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(PROFILE))
    result = CliRunner().invoke(cli, ["plan", str(profile), "--gpus", "2", "--eta", "0", "--lengths", str(run_dir),
                                      "--output", str(tmp_path / "plan"), "task=arithmetic", "steps=2",
                                      "rollout.batch_size=8", "rollout.group_size=4"])
    assert result.exit_code == 0, result.output
    assert f"rewards as in that run: {rewards['correct_rate']:.1%} correct" in result.output
    assert json.loads((tmp_path / "plan" / "plan.json").read_text())["workload"]["rewards"] == rewards
    # a run without its config (group size unknown) gives lengths alone
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "metrics.jsonl").write_text((run_dir / "metrics.jsonl").read_text())
    assert load_workload(bare).rewards is None
    assert load_workload(bare).trained_share == trained   # logged by every step, no config needed
    assert load_workload(bare).trained_lengths == trained_lengths
    # a run that trained 6-token prompts with 4-token answers, one step logged as quantiles (a step of many lengths):
    # areal plan trains sequences of those lengths, and says so
    six_four = [{**s, "trained_prompt_length_hist": [[6, s["trained_sequences"]]],
                 "trained_response_length_hist": [[4, s["trained_sequences"]]]} for s in steps]
    (bare / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in six_four))
    assert load_workload(bare).trained_lengths.prompts.values == (6,)
    assert load_workload(bare).trained_lengths.responses.mean == pytest.approx(4.0)
    # a step logged as quantiles (one of many lengths) weighs its trained sequences, as a histogram weighs its counts
    ten = [dict(s) for s in six_four]
    ten[0].pop("trained_response_length_hist")
    ten[0]["trained_response_length_quantiles"] = [[0.0, 10], [0.5, 10], [1.0, 10]]
    (bare / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in ten))
    first = steps[0]["trained_sequences"]
    assert load_workload(bare).trained_lengths.responses.mean == pytest.approx((10 * first + 4 * (sequences - first))
                                                                               / sequences)
    (bare / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in six_four))
    result = CliRunner().invoke(cli, ["plan", str(profile), "--gpus", "2", "--eta", "0", "--lengths", str(bare),
                                      "--output", str(tmp_path / "plan-bare"), "task=arithmetic", "steps=2",
                                      "rollout.batch_size=8", "rollout.group_size=4"])
    assert result.exit_code == 0, result.output
    workload = json.loads((tmp_path / "plan-bare" / "plan.json").read_text())["workload"]
    assert workload["trained_lengths"] == pytest.approx({"prompt_mean": 6.0, "response_mean": 4.0}, abs=0.01)
    assert "the step trains sequences of that run's trained lengths (6.0 prompt + 4.0 response tokens" in workload["text"]
    # ... not for a planned run that trains every group (a KL term)
    result = CliRunner().invoke(cli, ["plan", str(profile), "--gpus", "2", "--eta", "0", "--lengths", str(bare),
                                      "--output", str(tmp_path / "plan-kl"), "task=arithmetic", "steps=2",
                                      "rollout.batch_size=8", "rollout.group_size=4", "trainer.kl_coef=0.1"])
    assert result.exit_code == 0, result.output
    assert "trained_lengths" not in json.loads((tmp_path / "plan-kl" / "plan.json").read_text())["workload"]
    # a malformed one is named; a run made before they were logged has none
    six_four[1]["trained_prompt_length_hist"] = [[6, -1]]
    (bare / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in six_four))
    with pytest.raises(ConfigError, match=r"metrics.jsonl:2: trained_prompt_length_hist must be \[\[tokens, count\]"):
        load_workload(bare)
    (bare / "metrics.jsonl").write_text("".join(json.dumps({k: v for k, v in s.items() if not k.startswith("trained_")})
                                                + "\n" for s in steps))
    assert load_workload(bare).trained_lengths is None


def test_the_share_of_length_variance_a_prompt_decides_is_measured_by_the_intraclass_correlation():
    assert length_prompt_share([[40, 40, 40], [3, 3, 3], [9, 9]]) == 1.0        # a group's answers equally long
    assert length_prompt_share([[3, 40], [40, 3], [3, 40], [40, 3]]) == 0.0     # every group spans the same range
    assert length_prompt_share([[5, 5], [5, 5]]) is None and length_prompt_share([[3, 9]]) is None
    assert length_prompt_share([[7], [9], [30]]) is None                        # no group of two: nothing to compare
    # by hand (one-way ANOVA, two groups of two, log lengths a +- 1 around means 0 and 4 in log units)
    import math
    groups = [[round(math.exp(x)) for x in (1, 3)], [round(math.exp(x)) for x in (5, 7)]]
    logs = [[math.log(n) for n in g] for g in groups]
    means = [sum(g) / 2 for g in logs]
    grand = sum(means) / 2
    between = sum(2 * (m - grand) ** 2 for m in means)
    within = sum((x - m) ** 2 for g, m in zip(logs, means) for x in g) / 2
    assert length_prompt_share(groups) == pytest.approx((between - within) / (between + within))


def test_answers_to_one_prompt_run_alike_by_prompt_share_and_each_answer_keeps_its_distribution(tmp_path):
    independent = load_workload("mean=2000,p99=7000,max=32768")
    alike = load_workload("mean=2000,p99=7000,max=32768,prompt_share=0.8")
    groups = [[f"p{n}.{i}" for i in range(16)] for n in range(600)]
    drawn = {name: [[w(rid, 1, 32768) for rid in group] for group in groups]
             for name, w in (("independent", independent), ("alike", alike))}
    assert length_prompt_share(drawn["independent"]) < 0.03
    assert length_prompt_share(drawn["alike"]) == pytest.approx(0.8, abs=0.06)
    # one answer of each prompt: independent draws either way, of the same log-normal
    mu, sigma = lognormal_parameters(2000, 7000)
    firsts = sorted(g[0] for g in drawn["alike"])
    median = firsts[len(firsts) // 2]
    assert median == pytest.approx(math.exp(mu), rel=0.1)
    # prompt_share 0 is the draw the sampled_lengths workflow always made (a run's lengths did not change)
    options = {"lengths": {"mean": 2000, "p99": 7000}, "seed": 3}
    assert [sampled_length(options, rid, 10 ** 6) for rid in RIDS[:300]] == [
        max(1, round(random.Random(zlib.crc32(rid.encode()) ^ 3).lognormvariate(mu, sigma))) for rid in RIDS[:300]]
    # the workflow takes the option as the workload does; a later turn of an answer is its prompt's too
    shared = {"lengths": {"mean": 2000, "p99": 7000, "max": 32768, "prompt_share": 0.8}, "seed": 0}
    assert [sampled_length(shared, rid, 32768) for rid in RIDS[:300]] == [alike(rid, 1, 32768) for rid in RIDS[:300]]
    # a run that logged its share: its lengths are drawn alike by it, from one of its steps a prompt
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(
        {"step": s, "responses": 64, "response_length_prompt_share": share,
         **length_distribution([max(1, round(random.Random(s * 100 + i).lognormvariate(5, 1))) for i in range(64)])})
        for s, share in ((1, 0.9), (2, 0.7))) + "\n")
    run = load_workload(tmp_path)
    assert run.prompt_share == pytest.approx(0.8) and run.summary()["prompt_share"] == pytest.approx(0.8)
    assert length_prompt_share([[run(rid, 1, 10 ** 6) for rid in group] for group in groups]) > 0.6
    assert length_prompt_share([[load_workload("mean=150,p99=1500")(rid, 1, 10 ** 6) for rid in group]
                                for group in groups]) < 0.03


def test_a_run_logs_how_alike_its_answers_to_one_prompt_ran(run_dir):
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    shares = [step["response_length_prompt_share"] for step in steps]
    assert all(share is None or 0 <= share <= 1 for share in shares) and any(share is not None for share in shares)
    logged = [s for s in shares if s is not None]
    assert load_workload(run_dir).prompt_share == pytest.approx(sum(logged) / len(logged))
