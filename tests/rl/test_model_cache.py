"""The model cache shared by runs: runs started together on a cold cache must not pull a model from under each
other (`bench/bench_staleness.py --parallel` starts several `areal train` at once)."""
import os
import subprocess
import sys

from areal_core.rl.model_cache import build_cache_entry


def write_entry(directory, marker):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.safetensors").write_bytes(b"weights")
    (directory / "built_by").write_text(marker)


def test_a_new_entry_is_built_and_moved_into_place_with_nothing_left_beside_it(tmp_path):
    build_cache_entry(tmp_path / "entry", lambda directory: write_entry(directory, "run 1"))
    assert (tmp_path / "entry" / "built_by").read_text() == "run 1"
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]


def test_a_whole_entry_in_place_is_used_without_building(tmp_path):
    write_entry(tmp_path / "entry", "run 1")
    built = []
    assert build_cache_entry(tmp_path / "entry", built.append) == tmp_path / "entry"
    assert built == []


def test_an_entry_another_run_put_in_place_while_we_built_is_kept_and_ours_dropped(tmp_path):
    def build_while_another_run_finishes(directory):
        write_entry(directory, "run 2")
        write_entry(tmp_path / "entry", "run 1")  # the other run finishes first
        build_while_another_run_finishes.in_use = (tmp_path / "entry" / "model.safetensors").stat().st_ino

    build_cache_entry(tmp_path / "entry", build_while_another_run_finishes)
    # Run 1 may be loading these very files: they must not have been deleted or replaced.
    assert (tmp_path / "entry" / "built_by").read_text() == "run 1"
    assert (tmp_path / "entry" / "model.safetensors").stat().st_ino == build_while_another_run_finishes.in_use
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]


def test_a_damaged_entry_without_weights_is_replaced(tmp_path):
    (tmp_path / "entry").mkdir()
    (tmp_path / "entry" / "config.json").write_text("{}")
    build_cache_entry(tmp_path / "entry", lambda directory: write_entry(directory, "run 3"))
    assert (tmp_path / "entry" / "built_by").read_text() == "run 3"


def test_processes_resolving_the_embedded_model_at_once_all_get_it_whole(tmp_path):
    script = ("import sys; from areal_core.rl.config import ModelConfig; "
              "from areal_core.rl.model_cache import resolve_model; "
              "path = resolve_model(ModelConfig(num_hidden_layers=1, hidden_size=32)); "
              "assert (path / 'model.safetensors').stat().st_size > 0; print(path)")
    env = {**os.environ, "AREAL_CACHE_DIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    processes = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
                 for _ in range(4)]
    outputs = [p.communicate(timeout=120)[0].strip() for p in processes]
    assert [p.returncode for p in processes] == [0, 0, 0, 0]
    assert len(set(outputs)) == 1
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [os.path.basename(outputs[0])]  # no tmp left
