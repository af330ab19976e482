"""`areal leaderboard` over a store filled by `areal eval` runs of three replayed "models" whose answers
are right where we decide, so every rank, average and pass@k is known in advance; the HTML page is
loaded in headless Chromium: the table renders, sorts, has its plots and links to per-sample details."""
from __future__ import annotations

import json

import pytest
from selenium.webdriver.common.by import By

from eval_support import areal_cli, write_replay

LIMIT = 8
# model -> (arithmetic-test: right(problem, sample) with n=4, arithmetic: right(problem) with n=1)
MODELS = {
    "strong": (lambda i, j: True, lambda i: i < 6),         # 1.0, 0.75 -> average 0.875
    "middling": (lambda i, j: j < 2, lambda i: i < 2),     # 0.5, 0.25 -> 0.375
    "lopsided": (lambda i, j: False, lambda i: True),      # 0.0, 1.0  -> 0.5
}


@pytest.fixture(scope="module")
def store(tmp_path_factory, data_dir):
    root = tmp_path_factory.mktemp("leaderboard")
    env = {"AREAL_DATA_DIR": str(data_dir), "AREAL_EVAL_DB": str(root / "evals.sqlite")}
    for name, (sampled, single) in MODELS.items():
        replay = root / f"{name}.jsonl"
        write_replay(replay, "arithmetic-test", LIMIT, 4, sampled, with_task=True)
        write_replay(replay, "arithmetic", LIMIT, 1, lambda i, j: single(i), with_task=True)
        run = areal_cli("eval", "--model", f"replay:{replay}", "--tasks", "arithmetic-test,arithmetic", "--limit",
                        str(LIMIT), "--output-dir", str(root / "evals"), env=env)
        assert run.returncode == 0, run.stderr
    return root, env


def test_json_ranks_models_per_task_and_on_average(store):
    root, env = store
    run = areal_cli("leaderboard", "--format", "json", env=env)
    assert run.returncode == 0, run.stderr
    board = json.loads(run.stdout)
    assert board["tasks"] == ["arithmetic", "arithmetic-test"]
    assert [(m["rank"], m["model"], m["average"]) for m in board["models"]] == [
        (1, "strong", 0.875), (2, "lopsided", 0.5), (3, "middling", 0.375)]
    ranks = {m["model"]: {task: entry["rank"] for task, entry in m["tasks"].items()} for m in board["models"]}
    assert ranks == {"strong": {"arithmetic": 2, "arithmetic-test": 1}, "lopsided": {"arithmetic": 1, "arithmetic-test": 3},
                     "middling": {"arithmetic": 3, "arithmetic-test": 2}}
    middling = next(m for m in board["models"] if m["model"] == "middling")["tasks"]["arithmetic-test"]
    assert middling["metrics"]["pass@2"] == pytest.approx(5 / 6) and middling["metrics"]["pass@4"] == 1.0
    assert middling["settings"]["n"] == 4 and middling["decoding"] == "replay"


def test_markdown_and_terminal_tables_show_ranks_and_settings(store):
    _, env = store
    markdown = areal_cli("leaderboard", "--format", "markdown", env=env).stdout
    assert "| 1 | strong (" in markdown and "| 87.5 | 75.0 ± 16.4 | 100.0 ± 0.0 |" in markdown
    assert "## arithmetic-test" in markdown and "replayed, n=4, k=1,2,4" in markdown
    table = areal_cli("leaderboard", "--tasks", "arithmetic", env={**env, "COLUMNS": "200"}).stdout
    assert table.index("lopsided") < table.index("strong") < table.index("middling")


def test_filters_and_an_empty_selection_is_a_clear_error(store):
    _, env = store
    only = json.loads(areal_cli("leaderboard", "--format", "json", "--models", "s*", env=env).stdout)
    assert [m["model"] for m in only["models"]] == ["strong"]
    missing = areal_cli("leaderboard", "--tasks", "gsm8k", env=env)
    assert missing.returncode == 2 and "has no finished evals for tasks gsm8k; run `areal eval` first" in missing.stderr
    greedy = areal_cli("leaderboard", "--decoding", "greedy", env=env)  # every run here was replayed
    assert greedy.returncode == 2 and "has no finished evals with greedy decoding" in greedy.stderr


def column(driver, table_id: str, index: int) -> list[str]:
    return [row.find_elements(By.TAG_NAME, "td")[index].text
            for row in driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")]


def test_html_page_renders_sorts_plots_and_links_to_samples_in_chromium(store, browser, tmp_path):
    root, env = store
    page = tmp_path / "leaderboard.html"
    run = areal_cli("leaderboard", "--format", "html", "--output", str(page), env=env)
    assert run.returncode == 0, run.stderr
    text = page.read_text()
    assert "<script src" not in text and "<link" not in text and "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    browser.get(page.as_uri())

    models = [cell.split()[0] for cell in column(browser, "overview", 1)]
    assert models == ["strong", "lopsided", "middling"]
    headers = browser.find_elements(By.CSS_SELECTOR, "#overview thead th")
    assert [h.text for h in headers] == ["rank", "model", "average", "arithmetic", "arithmetic-test"]
    headers[3].click()  # the `arithmetic` column, ascending
    assert [c.split()[0] for c in column(browser, "overview", 1)] == ["middling", "strong", "lopsided"]
    assert headers[3].get_attribute("aria-sort") == "ascending"
    headers[3].click()
    assert [c.split()[0] for c in column(browser, "overview", 1)] == ["lopsided", "strong", "middling"]
    headers[1].click()  # by name
    assert [c.split()[0] for c in column(browser, "overview", 1)] == ["lopsided", "middling", "strong"]

    bars = browser.find_elements(By.CSS_SELECTOR, "svg.plot-bars rect.bar")
    assert len(bars) == 6 and all(bar.size["width"] > 0 for bar in bars)
    curves = browser.find_elements(By.CSS_SELECTOR, "svg.plot-passk")
    assert len(curves) == 1  # only arithmetic-test has several k
    assert len(curves[0].find_elements(By.CSS_SELECTOR, "path.curve")) == 3

    strong_row = browser.find_element(By.CSS_SELECTOR, '#overview tr[data-model="strong"]')
    link = strong_row.find_elements(By.TAG_NAME, "a")[-1]  # strong on arithmetic-test
    target = link.get_attribute("href").split("#")[1]
    link.click()
    section = browser.find_element(By.ID, target)
    assert "strong on arithmetic-test" in section.find_element(By.TAG_NAME, "h3").text
    samples = section.find_element(By.CSS_SELECTOR, "details.samples")
    assert samples.get_attribute("open") is not None
    rows = samples.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == LIMIT * 4 and all(r.find_elements(By.TAG_NAME, "td")[2].text == "correct" for r in rows)

    browser.execute_script("window.scrollTo(0, 0)")
    shot = tmp_path / "leaderboard.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
