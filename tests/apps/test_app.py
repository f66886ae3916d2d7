"""`hf-syntax-mt app` (hf_syntax_mt.app): the page's functions, the page through gradio's own client (bad input
answered in the page, 20 concurrent requests all answered with the process's memory flat), the Space export, and
one real browser (Debian's headless Chromium, driven by selenium) that types Japanese, translates and finds the
tree. `HF_SYNTAX_MT_APP_SCREENSHOT=FILE` keeps the browser's screenshot; `HF_SYNTAX_MT_APP_MODELS=DIR,DIR` shows
those models instead of the tiny ones trained here."""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import pytest

from hf_syntax_mt.app import (
    AppError,
    Translator,
    ViewFolders,
    export_space,
    read_sentences,
    sentence_views,
    table_headers,
    translate_all,
)
from hf_syntax_mt.features.training_data import build_annotator
from hf_syntax_mt.training.run import train
from training_helpers import scratch_dir, tiny_args

PAIRS = [  # written for these tests
    ("私は赤い車を買った。", "I bought a red car ."),
    ("猫が庭で寝ている。", "The cat is sleeping in the garden ."),
    ("彼女は新しい本を読んだ。", "She read a new book ."),
    ("兄は毎朝公園を走る。", "My brother runs in the park every morning ."),
]
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def test_the_app_module_imports_no_gradio():
    code = "import sys, hf_syntax_mt.app; print('gradio' in sys.modules, 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "False"], done.stderr[-2000:]


@pytest.mark.parametrize("text, message", [
    ("", "Type one or more sentences"), ("  \n \t\n", "Type one or more sentences"),
    ("\n".join(["猫"] * 65), "at most 64"),
])
def test_bad_input_is_one_sentence_of_the_page(text, message):
    with pytest.raises(AppError, match=re.escape(message)):
        read_sentences(text)


@pytest.mark.parametrize("bad, code", [("\x00", "U+0000"), ("\x80", "U+0080"), ("\ufffd", "U+FFFD")])
def test_a_line_with_a_character_that_is_not_text_is_refused_alone(bad, code):
    """As `translate` does and the README says: that line's cells stay empty with one message, the others are
    translated (the model: a tiny transformer_abs of the synthetic corpus)."""
    from training_helpers import trained_model

    translator = Translator.load(str(trained_model("transformer_abs")[0]))
    sentences = read_sentences(f"the dog slept .\nthe cat{bad} ran .\nsome bird sang .")
    rows, messages = translate_all([translator], sentences, beams=1, max_new_tokens=4, scores=True)
    assert messages == [f"Sentence 2 holds a character that is not text ({code}): remove it."]
    expected = translator.pipeline([sentences[0], sentences[2]], max_new_tokens=4, num_beams=1, return_scores=True)
    assert [row[2:] for row in rows] == [[expected[0]["translation_text"], f"{expected[0]['score']:.3f}"], ["", ""],
                                         [expected[1]["translation_text"], f"{expected[1]['score']:.3f}"]]


def test_sentences_are_the_non_empty_lines():
    assert read_sentences(" 猫が寝ている。 \n\n私は本を読んだ。\n") == ["猫が寝ている。", "私は本を読んだ。"]


def test_lines_are_read_as_translate_reads_them():
    """Ended at \\n, \\r\\n and \\r only; a form feed and a zero-width space are spaces, a bell is removed (as
    SentencePiece's NMT rule does), so a line of format characters is empty and left out."""
    assert read_sentences("猫が\x0c寝ている。\r\n\u200b\n\ufeff私は本を\x07読んだ。\u2028犬。") == [
        "猫が 寝ている。", "私は本を読んだ。 犬。"]


@pytest.fixture(scope="module")
def models():
    """Folders of a tiny transformer_abs and a tiny transformer_dep_labeled_rel+transformer_sla trained with GiNZA
    (or the models of HF_SYNTAX_MT_APP_MODELS)."""
    given = os.environ.get("HF_SYNTAX_MT_APP_MODELS")
    if given:
        return [Path(folder) for folder in given.split(",")]
    spacy_util = pytest.importorskip("spacy.util")
    if not spacy_util.is_package("ja_ginza"):
        pytest.skip("ja_ginza is not installed")
    work = scratch_dir("app")
    (work / "train.ja").write_text("".join(ja + "\n" for ja, _ in PAIRS * 4), encoding="utf-8")
    (work / "train.en").write_text("".join(en + "\n" for _, en in PAIRS * 4), encoding="utf-8")
    annotator = build_annotator("ja_ginza", "ja")
    folders = []
    for name, preset in (("abs", "transformer_abs"), ("dep", "transformer_dep_labeled_rel+transformer_sla")):
        model_args, data_args, training_args = tiny_args(work / name, preset, parser="ja_ginza", data_dir=work,
                                                         max_steps=20, learning_rate=5e-3, eval_strategy="no",
                                                         save_strategy="no", load_best_model_at_end=False)
        model_args.vocab_size = 200
        data_args.source_lang, data_args.target_lang, data_args.validation_file = "ja", "en", None
        train(model_args, data_args, training_args, annotator=annotator)
        folders.append(work / name)
    return folders


@pytest.fixture(scope="module")
def translators(models):
    return [Translator.load(str(folder)) for folder in models]


def test_translations_side_by_side_and_a_line_too_long_answered(translators):
    limit = translators[1].max_source_tokens
    sentences = [PAIRS[0][0], "猫" * (limit + 10), PAIRS[1][0]]
    calls = []
    rows, messages = translate_all(translators, sentences, beams=2, max_new_tokens=8,
                                   progress=lambda done, total: calls.append((done, total)))
    assert [row[:2] for row in rows] == [["1", sentences[0]], ["2", sentences[1]], ["3", sentences[2]]]
    assert all(len(row) == 4 for row in rows) and rows[0][2] and rows[0][3]
    assert rows[1][2] == rows[1][3] == ""  # the long line: empty cells, and a message for each model
    assert len(messages) == 2 and all("sentence 2:" in m and f"max_position_embeddings={limit}" in m for m in messages)
    assert calls[-1] == (6, 6)
    assert translate_all(translators[:1], sentences[:1], beams=2, max_new_tokens=8)[0][0][2] == rows[0][2]
    # with scores: each translation followed by the pipeline's score of it, 3 decimals; none for the long line
    scored, _ = translate_all(translators, sentences, beams=2, max_new_tokens=8, scores=True)
    assert [row[2::2] for row in scored] == [row[2:] for row in rows]
    for column, translator in enumerate(translators):
        expected = translator.pipeline(sentences, num_beams=2, max_new_tokens=8, return_scores=True)
        assert [row[3 + 2 * column] for row in scored] == [f"{o['score']:.3f}" if "score" in o else "" for o in expected]
    assert scored[0][3] != "" and scored[1][3] == scored[1][5] == "" and float(scored[0][3]) < 0
    names = [t.label for t in translators]
    assert table_headers(names, scores=True) == ["#", "source", names[0], f"{names[0]} score", names[1],
                                                 f"{names[1]} score"]
    assert table_headers(names) == ["#", "source", *names]
    with pytest.raises(AppError, match="beam size"):
        translate_all(translators, sentences, beams=0)


def test_the_tree_and_the_heatmaps_of_a_sentence(translators, tmp_path):
    plain, syntax = translators
    tree, heatmap, said = sentence_views(syntax, PAIRS[0][0], tmp_path, heatmap="relations")
    assert tree.stat().st_size > 1000 and heatmap.stat().st_size > 1000 and "the tree the parser gives it" in said
    for kind in ("attention", "localized attention mask"):
        assert sentence_views(syntax, PAIRS[0][0], tmp_path / kind, heatmap=kind, layer=2, head=1)[1].is_file()
    tree, heatmap, said = sentence_views(plain, PAIRS[0][0], tmp_path / "plain")
    assert tree is None and heatmap.is_file() and "no tree" in said
    with pytest.raises(AppError, match="reads no dependency relations"):
        sentence_views(plain, PAIRS[0][0], tmp_path, heatmap="relations")
    with pytest.raises(AppError, match="encoder layers 1 to"):
        sentence_views(syntax, PAIRS[0][0], tmp_path, layer=9)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def served(models):
    """The page on a free loopback port, and its URL."""
    pytest.importorskip("gradio")
    from hf_syntax_mt.app import launch

    port = _free_port()
    page = launch([str(folder) for folder in models], port=port, block=False)
    yield f"http://127.0.0.1:{port}/"
    page.close()


def test_the_page_through_gradios_client(served):
    from gradio_client import Client

    client = Client(served, verbose=False)
    table, messages = client.predict(f"{PAIRS[0][0]}\n{PAIRS[2][0]}", 2, 8, 1.5, 10, False, api_name="/translate")
    assert [row[1] for row in table["data"]] == [PAIRS[0][0], PAIRS[2][0]] and all(row[2] for row in table["data"])
    assert messages == "" and len(table["headers"]) == 4
    scored, _ = client.predict(f"{PAIRS[0][0]}\n{PAIRS[2][0]}", 2, 8, 1.5, 10, True, api_name="/translate")
    assert scored["headers"][3::2] == [f"{name} score" for name in table["headers"][2:]]
    assert [row[2::2] for row in scored["data"]] == [row[2:] for row in table["data"]]
    assert all(float(cell) < 0 for row in scored["data"] for cell in row[3::2])
    _, messages = client.predict(" \n ", 2, 8, 1.5, 10, False, api_name="/translate")
    assert messages == "**Type one or more sentences to translate, one a line.**"
    tree, heatmap, said = client.predict(PAIRS[0][0], 1, table["headers"][3], "attention", 1, 0, api_name="/show")
    assert Path(tree).is_file() and Path(heatmap).is_file() and "layer 1, head 0" in said
    *_, said = client.predict(PAIRS[0][0], 5, table["headers"][3], "attention", 1, 0, api_name="/show")
    assert said == "**Choose a sentence from 1 to 1.**"


def test_an_out_of_range_beam_through_the_api_is_answered_without_a_traceback(served, capfd):
    """Gradio's own message to the caller ("greater than maximum value 8"); nothing in the server's log (it printed
    the whole traceback of its slider's check)."""
    from gradio_client import Client

    client = Client(served, verbose=False)
    capfd.readouterr()
    with pytest.raises(Exception, match="greater than maximum value 8"):
        client.predict(PAIRS[0][0], 9, 8, 1.5, 10, False, api_name="/translate")
    assert "Traceback" not in capfd.readouterr().err
    import hf_syntax_mt.app

    assert not list(Path(hf_syntax_mt.app.__file__).parent.glob("*.pyi"))  # Gradio writes one for a component subclass


def test_the_views_keep_a_few_folders_of_pictures(served, tmp_path):
    """Each tree view writes its pictures in a new folder; only the newest few stay (the page made one a view and
    removed none), and every view is still answered with pictures that exist."""
    from gradio_client import Client

    views = ViewFolders(tmp_path, kept=3)
    made = [views.new() for _ in range(5)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in made[-3:])
    client = Client(served, verbose=False)
    table, _ = client.predict(PAIRS[0][0], 1, 8, 1.5, 10, False, api_name="/translate")
    for _ in range(12):
        tree, heatmap, said = client.predict(PAIRS[0][0], 1, table["headers"][3], "attention", 1, 0, api_name="/show")
        assert Path(tree).is_file() and Path(heatmap).is_file(), said
    [root] = sorted(Path(tempfile.gettempdir()).glob("hf_syntax_mt_app_*"), key=lambda p: p.stat().st_mtime_ns)[-1:]
    assert 1 <= len(list(root.iterdir())) <= ViewFolders(root).kept


def test_twenty_concurrent_requests_are_all_answered_with_memory_flat(served):
    """From loopback: 20 requests at once wait in the page's queue and are all answered; a second round of 20
    leaves the process's resident memory within 40 MB of where the first left it."""
    import psutil
    from gradio_client import Client

    client = Client(served, verbose=False)
    process = psutil.Process()

    def one_round():
        with ThreadPoolExecutor(max_workers=20) as pool:
            jobs = [pool.submit(client.predict, f"{PAIRS[i % 4][0]}\n{PAIRS[(i + 1) % 4][0]}", 2, 6, 1.5, 10, False,
                                api_name="/translate") for i in range(20)]
            return [job.result(timeout=300) for job in jobs]

    first = one_round()
    after_first = process.memory_info().rss
    second = one_round()
    after_second = process.memory_info().rss
    assert len(first) == len(second) == 20
    assert all(len(table["data"]) == 2 and table["data"][0][2] for table, _ in first + second)
    assert after_second - after_first < 40 * 2**20, (after_first, after_second)


def test_export_writes_a_space_folder(models, tmp_path):
    out = export_space([str(models[1]), "owner/hub-model"], tmp_path / "space")
    readme = (out / "README.md").read_text(encoding="utf-8")
    front = readme.split("---")[1]
    assert "sdk: gradio" in front and "app_file: app.py" in front and "sdk_version:" in front
    app = (out / "app.py").read_text(encoding="utf-8")
    assert "launch([str(HERE / 'models/dep'), 'owner/hub-model'], host=os.environ.get(\"GRADIO_SERVER_NAME\"" in app
    lines = (out / "requirements.txt").read_text().splitlines()
    options, requirements = [line for line in lines if line.startswith("-")], [l for l in lines if not l.startswith("-")]
    names = {re.split(r"[=<>\[]", line)[0].lower() for line in requirements}
    assert {"torch", "transformers", "gradio", "ja-ginza", "matplotlib"} <= names
    assert all("==" in line for line in requirements), requirements  # what was tested, not a newer release
    torch_version = metadata.version("torch")
    assert f"torch=={torch_version}" in requirements
    assert options == (["--extra-index-url https://download.pytorch.org/whl/cpu"] if torch_version.endswith("+cpu")
                       else [])
    assert (out / "models" / "dep" / "config.json").is_file() and (out / "hf_syntax_mt" / "app.py").is_file()
    assert not list((out / "models" / "dep").glob("checkpoint-*"))
    with pytest.raises(AppError, match="not empty"):
        export_space([str(models[1])], out)


@pytest.mark.skipif(not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()),
                    reason="no browser: Debian's chromium and chromium-driver are not installed (.ci/run installs them)")
def test_a_real_browser_types_japanese_translates_and_finds_the_tree(served, translators, tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as wait_for
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1600",
                 "--lang=ja"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        driver.get(served)
        box = WebDriverWait(driver, 60).until(wait_for.presence_of_element_located((By.CSS_SELECTOR, "#source textarea")))
        box.clear()
        box.send_keys(PAIRS[0][0])
        driver.find_element(By.ID, "translate").click()
        rows, _ = translate_all(translators, [PAIRS[0][0]], beams=4, length_a=1.5, length_b=10)
        expected = rows[0][3]
        WebDriverWait(driver, 180).until(lambda d: expected in d.find_element(By.ID, "translations").text)
        tree = WebDriverWait(driver, 180).until(
            lambda d: next((img for img in d.find_elements(By.CSS_SELECTOR, "#tree img")
                            if img.get_attribute("src") and img.size["width"] > 50), None))
        assert tree.get_attribute("src").split("?")[0].endswith(".png")
        assert PAIRS[0][0] in driver.find_element(By.ID, "translations").text
        # the scores box ticked: each translation gets its score column
        driver.find_element(By.CSS_SELECTOR, "#scores input").click()
        driver.find_element(By.ID, "translate").click()
        scored, _ = translate_all(translators, [PAIRS[0][0]], beams=4, length_a=1.5, length_b=10, scores=True)
        WebDriverWait(driver, 180).until(
            lambda d: f"{translators[1].label} score" in d.find_element(By.ID, "translations").text)
        assert scored[0][5] in driver.find_element(By.ID, "translations").text
        time.sleep(1)  # the heatmap's image settles
        shot = Path(os.environ.get("HF_SYNTAX_MT_APP_SCREENSHOT") or tmp_path / "page.png")
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
    finally:
        driver.quit()


def test_a_model_that_cannot_parse_raw_text_is_refused_when_the_page_starts(capsys):
    """A syntax model trained on pre-parsed data without a recorded parser: one line when the page starts, as
    `translate` says it, instead of an error at every request."""
    from hf_syntax_mt.cli import main
    from training_helpers import trained_model

    folder, _ = trained_model("transformer_dep_rel")
    with pytest.raises(AppError, match="needs parsed sources and records no parser"):
        Translator.load(str(folder))
    capsys.readouterr()
    assert main(["app", "--model", str(folder), "--port", str(_free_port())]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("hf-syntax-mt app: error: ") and "records no parser" in line


def test_the_exported_space_finds_its_models_beside_its_own_file_from_any_folder(tmp_path):
    """`python space/app.py` from the folder above: the page is given the models in space/models/ (here a stand-in
    for `launch` checks each as the page's loading does, and does not serve)."""
    from training_helpers import CHILD_ENV, trained_model

    folder, _ = trained_model("transformer_abs")
    export_space([str(folder), "owner/hub-model"], tmp_path / "space")
    checked = ("import runpy, sys; sys.path.insert(0, 'space'); import hf_syntax_mt.app as app; "
               "from hf_syntax_mt.inference.pipeline import model_location; "
               "app.launch = lambda models, **_: print([model_location(m) for m in models[:1]], models[1:]); "
               "runpy.run_path('space/app.py', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", checked], cwd=tmp_path, capture_output=True, text=True,
                          env=CHILD_ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == f"[{str(tmp_path / 'space' / 'models' / folder.name)!r}] ['owner/hub-model']"


def test_a_line_mostly_unknown_to_the_model_is_translated_with_a_note(tmp_path, capsys):
    """Emoji, Arabic, Hebrew to a model of the synthetic corpus: translated, and said so in the pipeline's output,
    the page's messages and `translate`'s stderr; a line the model knows gets no note."""
    from transformers import pipeline

    from hf_syntax_mt.cli import main
    from training_helpers import trained_model

    folder = str(trained_model("transformer_abs")[0])
    sentences = ["the dog slept .", "😀😀😀", "مرحبا بالعالم", "שלום עולם"]
    outputs = pipeline("syntax-translation", model=folder)(sentences, max_new_tokens=4)
    assert ["warning" in out for out in outputs] == [False, True, True, True]
    assert all("error" not in out for out in outputs)
    assert outputs[1]["warning"] == ("3 of its 4 subwords are unknown to this model (<unk>: characters it was not "
                                     "trained on), so its translation says little")
    _, messages = translate_all([Translator.load(folder)], sentences, beams=1, max_new_tokens=4)
    assert [m.split(":")[0] for m in messages] == [f"transformer_abs, sentence {n}" for n in (2, 3, 4)]
    assert all(m.endswith("so its translation says little (translated anyway)") for m in messages)
    (tmp_path / "input.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["translate", "--model", folder, "--max-new-tokens", "4", str(tmp_path / "input.txt")]) == 0
    printed = capsys.readouterr()
    assert len(printed.out.splitlines()) == 4
    assert [line.split(":")[1] for line in printed.err.splitlines()] == [" line 2", " line 3", " line 4"]
    assert all(line.endswith("(translated anyway)") for line in printed.err.splitlines())


def test_the_exported_space_listens_where_gradio_says_and_names_its_way_to_another_port(tmp_path):
    """GRADIO_SERVER_NAME / GRADIO_SERVER_PORT choose where the Space's app.py listens (it bound 7860 whatever they
    said); a port in use ends it with one line naming GRADIO_SERVER_PORT (it printed a traceback ending "give a free
    one with --port", an option app.py does not have). `launch` is a stand-in here."""
    from training_helpers import CHILD_ENV, trained_model

    export_space([str(trained_model("transformer_abs")[0])], tmp_path / "space")
    stand_in = ("import runpy, sys; sys.path.insert(0, 'space'); import hf_syntax_mt.app as app; {body}; "
                "runpy.run_path('space/app.py', run_name='__main__')")
    shown = "app.launch = lambda models, **settings: print(settings['host'], settings['port'], settings['port_option'])"
    done = subprocess.run([sys.executable, "-c", stand_in.format(body=shown)], cwd=tmp_path, capture_output=True,
                          text=True, env={**CHILD_ENV, "GRADIO_SERVER_PORT": "7931", "GRADIO_SERVER_NAME": "127.0.0.2"},
                          timeout=300)
    assert done.returncode == 0 and done.stdout.split() == ["127.0.0.2", "7931", "GRADIO_SERVER_PORT=PORT"], done.stderr
    done = subprocess.run([sys.executable, "-c", stand_in.format(body=shown)], cwd=tmp_path, capture_output=True,
                          text=True, env={k: v for k, v in CHILD_ENV.items() if not k.startswith("GRADIO_")},
                          timeout=300)
    assert done.stdout.split() == ["0.0.0.0", "7860", "GRADIO_SERVER_PORT=PORT"], done.stderr
    busy = ("def busy(models, port_option, **settings): raise app.AppError(f'port 7860 on 0.0.0.0 is in use: give a "
            "free one with {port_option}')\napp.launch = busy")
    code = stand_in.format(body="exec(" + repr(busy) + ")")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=CHILD_ENV,
                          timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == ("app.py: port 7860 on 0.0.0.0 is in use: give a free one with "
                                                   "GRADIO_SERVER_PORT=PORT")


def test_a_port_in_use_is_answered_with_the_option_that_chooses_another(capsys):
    """Not gradio's advice (GRADIO_SERVER_PORT, `server_port` of `launch()`): one line naming --port."""
    pytest.importorskip("gradio")
    from hf_syntax_mt.cli import main
    from training_helpers import trained_model

    folder = str(trained_model("transformer_abs")[0])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        capsys.readouterr()
        assert main(["app", "--model", folder, "--port", str(port)]) == 2
    assert capsys.readouterr().err == (f"hf-syntax-mt app: error: port {port} on 127.0.0.1 is in use: give a free "
                                       "one with --port\n")


def test_the_languages_are_recorded_shown_in_the_headers_and_a_difference_is_warned(tmp_path):
    """Training records the data's languages in the config (and the card); the page names them beside each model and
    warns, in the page and when it starts, when the models' source languages differ."""
    from training_helpers import synthetic_corpus

    corpus = synthetic_corpus()
    for suffix, language in (("src", "en"), ("tgt", "ja")):
        (tmp_path / f"train.{language}").write_text((corpus / f"train.{suffix}").read_text())
    model_args, data_args, training_args = tiny_args(tmp_path / "model", "transformer_abs", parser="none",
                                                     data_dir=tmp_path, max_steps=1, eval_strategy="no",
                                                     save_strategy="no", load_best_model_at_end=False)
    data_args.source_lang, data_args.target_lang, data_args.validation_file = "en", "ja", None
    train(model_args, data_args, training_args)
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert (config["source_lang"], config["target_lang"]) == ("en", "ja")
    assert "(en → ja)" in (tmp_path / "model" / "README.md").read_text()
    from hf_syntax_mt.app import language_warning

    english, other = Translator.load(str(tmp_path / "model")), Translator.load(str(tmp_path / "model"))
    assert english.label == "transformer_abs (en→ja)"
    assert table_headers([english.label]) == ["#", "source", "transformer_abs (en→ja)"]
    assert language_warning([english, other]) is None
    other.config.source_lang, other.label = "de", "other"
    assert language_warning([english, other]) == ("These models read different source languages (transformer_abs "
                                                  "(en→ja): en, other: de): a sentence suits one of them only.")
