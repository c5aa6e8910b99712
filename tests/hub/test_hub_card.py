"""The Hugging Face Hub: the model card's metadata parses with huggingface_hub, config.json holds what timm's own
export writes, ``local-dir:`` and ``hf-hub:`` loads give the trained model's logits, and ``push`` fails cleanly
without a token or a network and uploads exactly the three files in one commit (a fake HfApi, no network)."""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import timm
import torch
from huggingface_hub import ModelCard, RepoUrl
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError
from omegaconf import OmegaConf
from timm.models import _hub as timm_hub

import alternet.hub as hub
import alternet.models  # registers alternet's architectures with timm
from alternet.errors import CheckpointError, ConfigValueError
from alternet.hub.card import card_data, model_card
from alternet.training.module import ClassificationModule

from helpers import compose_train, datamodule_of, module_of

push_module = importlib.import_module("alternet.hub.push")  # the module (alternet.hub.push_to_hub is the function)
hub_main = importlib.import_module("alternet.hub.cli").main
FILES = ["README.md", "config.json", "model.safetensors"]
REPO = "me/alternet-tiny-digits"


@pytest.fixture
def run(digits_summary):
    """The suite's shared digits run (tests/conftest.py): alternet_tiny trained for a few batches on digits, tested
    and exported into ``<run_dir>/export``; read only."""
    return digits_summary


def export_of(run: dict) -> Path:
    return Path(run.run_dir) / "export"


def trained_model(run: dict) -> torch.nn.Module:
    return ClassificationModule.load_from_checkpoint(run.best_checkpoint, map_location="cpu").model.eval()


def untrained_checkpoint(path: Path, *overrides: str) -> Path:
    """A checkpoint holding the two entries alternet reads from Lightning's, for a model not worth training."""
    config = OmegaConf.to_container(compose_train(*overrides), resolve=True)
    module = module_of(config, datamodule_of(config).facts())
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, path)
    return path


def test_model_card_metadata_parses_with_huggingface_hub(run):
    card = ModelCard.load(export_of(run) / "README.md")
    data = card.data
    assert (data.library_name, data.license, data.pipeline_tag) == ("timm", "mit", "image-classification")
    assert {"image-classification", "timm", "alternet", "digits"} <= set(data.tags)
    assert data.datasets == ["digits"] and "accuracy" in data.metrics
    recorded = json.loads((Path(run.run_dir) / "metrics.json").read_text())["test"]
    results = {result.metric_type: result for result in data.eval_results}
    assert results["accuracy"].metric_value == recorded["acc"]
    assert results["top_5_accuracy"].metric_value == recorded["top5"]
    assert results["ece"].metric_value == recorded["ece"]
    assert {(r.task_type, r.dataset_type, r.dataset_split) for r in data.eval_results} == {
        ("image-classification", "digits", "test")
    }
    assert "# alternet_tiny on digits" in card.text
    assert 'timm.create_model("hf-hub:<user>/<repo>", pretrained=True)' in card.text  # before a push names it


def test_cifar100_cards_name_the_hub_data_set():
    config = {
        "architecture": "alternet_r50",
        "pretrained_cfg": {"license": "mit"},
        "alternet": {"ema": False, "data": {"name": "cifar100"}, "test": {"acc": 0.81, "top5": None}},
    }
    data = card_data(config, "me/r50")
    assert data.datasets == ["uoft-cs/cifar100"] and "cifar100" in data.tags and data.metrics == ["accuracy"]
    assert data.model_name == "r50" and [r.metric_value for r in data.eval_results] == [0.81]
    assert card_data({**config, "alternet": {**config["alternet"], "test": None}}).eval_results is None
    assert data.eval_results[0].dataset_split == "test"


def test_a_test_on_the_validation_split_is_published_as_the_validation_splits():
    """ImageNet's test is its val/ (no labels in its test split): the model-index said split 'test'."""
    config = {
        "architecture": "alternet_r50",
        "pretrained_cfg": {},
        "alternet": {"ema": False, "data": {"name": "imagenet"}, "test": {"acc": 0.8}, "test_split": "validation"},
    }
    result = card_data(config).eval_results[0]
    assert (result.dataset_type, result.dataset_split) == ("ILSVRC/imagenet-1k", "validation")


@pytest.mark.parametrize(
    "exported",
    [
        {"checkpoint": "last.ckpt", "tested_checkpoint": "best-epoch003.ckpt"},
        {"ema": True, "test_ema": None},
        {"recipe": {"test_flip": True}},
    ],
    ids=["another checkpoint tested", "the EMA exported, the raw weights tested", "tested on two views, flip-averaged"],
)
def test_results_measured_on_other_weights_are_not_published_as_the_models(exported):
    """The card's text says which weights were tested; the model-index, which the Hub shows as the model's own
    results, holds only the exported weights' numbers."""
    config = {
        "architecture": "alternet_r50",
        "pretrained_cfg": {},
        "alternet": {"ema": False, "data": {"name": "cifar100"}, "test": {"acc": 0.81}} | exported,
    }
    assert card_data(config).eval_results is None


def test_local_dir_export_gives_the_trained_models_logits(run):
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = trained_model(run)(x)
        loaded = timm.create_model(f"local-dir:{export_of(run)}", pretrained=True).eval()
        torch.testing.assert_close(loaded(x), expected, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["alternet_tiny run", "vit_ti_cifar checkpoint"])
def test_config_holds_every_key_of_timms_own_export(run, tmp_path, kind):
    if kind.startswith("vit"):
        source = untrained_checkpoint(tmp_path / "vit.ckpt", "model=vit_ti_cifar", "data=cifar100", "data.root=/none")
        out = hub.export(source, tmp_path / "export")
    else:
        source, out = run.best_checkpoint, export_of(run)
    ours = json.loads((out / "config.json").read_text())
    model = hub.load(source)  # the model the export was written from, with the data's pretrained_cfg
    timm_hub.save_config_for_hf(model, tmp_path / "timm.json", model_config={"label_names": ours["label_names"]})
    theirs = json.loads((tmp_path / "timm.json").read_text())

    # older timm (1.0.26) writes global_pool and model_args only when asked; its reader takes both (ours writes both)
    assert set(theirs) <= set(ours) and set(ours) - set(theirs) <= {"alternet", "global_pool", "model_args"}
    for key in {"architecture", "num_classes", "num_features", "global_pool", "label_names"} & set(theirs):
        assert ours[key] == theirs[key], key
    missing = set(theirs["pretrained_cfg"]) - set(ours["pretrained_cfg"])
    assert not missing, missing
    for key, value in theirs["pretrained_cfg"].items():
        assert ours["pretrained_cfg"][key] == value, key
    assert not {"url", "file", "hf_hub_id", "source"} & set(ours["pretrained_cfg"])
    # num_classes stays top-level only: loaders pass it beside **model_args
    assert set(theirs.get("model_args", {})) - {"num_classes"} <= set(ours["model_args"])


def test_an_export_leaves_the_training_dropout_rates_out_of_its_model_args(tmp_path):
    """timm's own export leaves drop rates out of model_args; ours kept drop_rate, so timm.create_model('hf-hub:...',
    pretrained=True, num_classes=5) fine-tuned with training's dropout unasked."""
    overrides = ["model=timm", "model.name=test_resnet", "+model.drop_rate=0.3", "+model.drop_block_rate=0.1"]
    source = untrained_checkpoint(tmp_path / "resnet.ckpt", *overrides)
    args = json.loads((hub.export(source, tmp_path / "export") / "config.json").read_text())["model_args"]
    assert not [key for key in args if "drop" in key], args


# push ------------------------------------------------------------------------------------------------


class FakeHub:
    """Stands in for ``HfApi``: records the calls and keeps each upload, as the Hub would, under ``remote``."""

    remote: Path
    calls: list

    def __init__(self, token=None, library_name=None, library_version=None):
        self.endpoint = "https://huggingface.co"
        self.calls.append(("init", token, library_name))

    def create_repo(self, repo_id, *, repo_type=None, private=False, exist_ok=False):
        self.calls.append(("create_repo", repo_id, private, exist_ok))
        return RepoUrl(f"{self.endpoint}/{repo_id}", endpoint=self.endpoint)

    def create_branch(self, repo_id, *, branch, repo_type=None, exist_ok=False):
        self.calls.append(("create_branch", repo_id, branch))

    def upload_folder(
        self, *, repo_id, folder_path, repo_type=None, revision=None, commit_message=None, delete_patterns=()
    ):
        self.calls.append(("upload_folder", repo_id, sorted(os.listdir(folder_path)), revision, commit_message))
        for pattern in delete_patterns:  # the repository's files that match and are not uploaded
            for stale in (self.remote / repo_id).glob(pattern):
                if not (Path(folder_path) / stale.name).exists():
                    stale.unlink()
        shutil.copytree(folder_path, self.remote / repo_id, dirs_exist_ok=True)
        return SimpleNamespace(commit_url=f"{self.endpoint}/{repo_id}/commit/abc123")


@pytest.fixture
def fake_hub(tmp_path, monkeypatch) -> type[FakeHub]:
    """A token, the fake Hub in place of HfApi, and temporary directories under ``tmp_path/tmp``."""
    monkeypatch.setenv("HF_TOKEN", "hf_fake")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    fake = type("Hub", (FakeHub,), {"remote": tmp_path / "remote", "calls": []})
    monkeypatch.setattr(push_module, "HfApi", fake)
    return fake


def test_push_without_a_token_fails_before_any_work(fake_hub, run, tmp_path, monkeypatch):
    """What is pushed is checked first (a wrong source or --ema is said without a token), then the credentials,
    before anything remote."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))  # no cached login
    (tmp_path / "notes").mkdir()
    with pytest.raises(
        SystemExit, match=r"is neither an export directory \(config.json\), a run directory nor a checkpoint"
    ):
        hub_main(["push", str(tmp_path / "notes"), REPO])  # a folder that is no export, run or checkpoint
    with pytest.raises(SystemExit) as exit_info:
        hub_main(["push", str(export_of(run)), REPO])
    message = str(exit_info.value.code)
    assert message.startswith("error: no Hugging Face token") and "\n" not in message
    assert "hf auth login" in message and "HF_TOKEN" in message
    assert fake_hub.calls == [] and list((tmp_path / "tmp").iterdir()) == []


def test_push_to_an_unreachable_hub_is_one_line_and_leaves_no_export(run, tmp_path, monkeypatch):
    """The real client against a port nothing listens on (HF_ENDPOINT as huggingface_hub read it at import)."""
    endpoint = "http://127.0.0.1:9"
    monkeypatch.setenv("HF_TOKEN", "hf_fake")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_constants, "ENDPOINT", endpoint)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    with pytest.raises(SystemExit) as exit_info:
        hub_main(["push", run.run_dir, REPO])
    message = str(exit_info.value.code)
    assert message.startswith(f"error: could not reach the Hugging Face Hub at {endpoint} to push {REPO}"), message
    assert "\n" not in message and "run the command again" in message
    assert list((tmp_path / "tmp").iterdir()) == []  # the staged export is gone


def test_push_uploads_the_three_files_in_one_commit(run, fake_hub, tmp_path, capsys):
    (fake_hub.remote / REPO).mkdir(parents=True)
    (fake_hub.remote / REPO / "pytorch_model.bin").write_bytes(b"an earlier push's weights")
    hub_main(["push", run.run_dir, REPO, "--private", "--commit-message", "first"])
    assert sorted(p.name for p in (fake_hub.remote / REPO).iterdir()) == FILES  # nothing else to load from
    staged = list((tmp_path / "tmp").iterdir())
    assert [call[0] for call in fake_hub.calls] == ["init", "create_repo", "upload_folder"]
    assert fake_hub.calls[0][1:] == ("hf_fake", "alternet")
    assert fake_hub.calls[1] == ("create_repo", REPO, True, True)
    assert fake_hub.calls[2] == ("upload_folder", REPO, FILES, None, "first")
    assert staged == []  # the temporary export is removed after the upload

    output = capsys.readouterr().out
    assert f"Pushed {run.run_dir} to https://huggingface.co/{REPO}" in output
    assert f'import alternet.models, timm; timm.create_model("hf-hub:{REPO}", pretrained=True)' in output
    uploaded = fake_hub.remote / REPO
    card = ModelCard.load(uploaded / "README.md")
    assert f'timm.create_model("hf-hub:{REPO}", pretrained=True)' in card.text
    assert card.data.model_name == REPO.split("/")[-1] and card.data.library_name == "timm"


def test_the_pushed_cards_snippet_names_the_branch_and_the_namespace(run, fake_hub, monkeypatch):
    """--revision ema: the card on branch ema told readers to load hf-hub:USER/REPO, main's weights; a bare NAME
    (the token's namespace) was written as hf-hub:NAME, a repository at the Hub's root."""
    hub_main(["push", run.run_dir, REPO, "--revision", "ema"])
    card = ModelCard.load(fake_hub.remote / REPO / "README.md")
    assert f'timm.create_model("hf-hub:{REPO}@ema", pretrained=True)' in card.text
    assert card.data.model_name == REPO.split("/")[-1]
    config = json.loads((export_of(run) / "config.json").read_text())
    assert card_data(config, f"{REPO}@exp/v2").model_name == REPO.split("/")[-1]  # a branch may hold a "/"

    def in_namespace(self, repo_id, *, repo_type=None, private=False, exist_ok=False):
        self.calls.append(("create_repo", repo_id, private, exist_ok))
        return RepoUrl(f"{self.endpoint}/me/{repo_id}", endpoint=self.endpoint)

    monkeypatch.setattr(fake_hub, "create_repo", in_namespace)
    hub_main(["push", run.run_dir, "tiny"])
    card = ModelCard.load(fake_hub.remote / "me" / "tiny" / "README.md")
    assert 'timm.create_model("hf-hub:me/tiny", pretrained=True)' in card.text and "hf-hub:tiny" not in card.text


def test_push_of_a_users_model_function_names_alternets_loader_not_timms(run, fake_hub, tmp_path, capsys):
    """timm builds a user's model function without its weights: the printed load line named timm all the same."""
    export = tmp_path / "export"
    shutil.copytree(export_of(run), export)
    config = json.loads((export / "config.json").read_text())
    config["alternet"]["timm_loads"] = False  # as an export of a user's model function records it
    (export / "config.json").write_text(json.dumps(config))
    hub_main(["push", str(export), REPO])
    output = capsys.readouterr().out
    assert f'Load: alternet.hub.load("hf-hub:{REPO}")' in output and "timm.create_model" not in output


def test_what_push_uploads_loads_through_timms_hf_hub_name(run, fake_hub, monkeypatch):
    hub.push_to_hub(export_of(run), REPO)
    config = json.loads((export_of(run) / "config.json").read_text())
    assert (export_of(run) / "README.md").read_text() == model_card(config)  # the export's card is untouched
    assert (fake_hub.remote / REPO / "README.md").read_text() == model_card(config, REPO)

    def download(repo_id, filename, revision=None, cache_dir=None, **_):  # the Hub, served from the fake's uploads
        path = fake_hub.remote / repo_id / filename
        if not path.is_file():
            raise EntryNotFoundError(f"{filename} is not in {repo_id}")
        return str(path)

    monkeypatch.setattr(timm_hub, "hf_hub_download", download)
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        loaded = timm.create_model(f"hf-hub:{REPO}", pretrained=True).eval()
        torch.testing.assert_close(loaded(x), trained_model(run)(x), rtol=0, atol=0)


def test_push_keeps_an_edited_card_and_refuses_bad_sources_before_the_hub(run, fake_hub, tmp_path):
    edited = tmp_path / "edited"
    shutil.copytree(export_of(run), edited)
    (edited / "README.md").write_text("---\nlibrary_name: timm\n---\n# my own card\n")
    (edited / "notes.txt").write_text("not uploaded")
    pushed = hub.push_to_hub(edited, REPO, revision="v1")
    assert pushed.timm_name == f"hf-hub:{REPO}@v1"
    assert ("create_branch", REPO, "v1") in fake_hub.calls
    assert fake_hub.calls[-1][2:4] == (FILES, "v1")
    assert (fake_hub.remote / REPO / "README.md").read_text().endswith("# my own card\n")

    fake_hub.calls.clear()
    with pytest.raises(hub.PushError, match="does not exist"):
        hub.push_to_hub(tmp_path / "missing", REPO)
    with pytest.raises(hub.PushError, match="holds no EMA weights"):
        hub.push_to_hub(edited, REPO, ema=True)
    with pytest.raises(hub.PushError, match="is not a Hub repository id"):
        hub.push_to_hub(edited, "a/b/c")
    (edited / "model.safetensors").write_bytes(b"truncated")
    with pytest.raises(CheckpointError, match="unreadable, truncated"):
        hub.push_to_hub(edited, REPO)
    assert fake_hub.calls == []  # nothing reached the Hub


@pytest.mark.parametrize(("status", "message"), [(401, "rejected the token (401)"), (403, "may not write to")])
def test_a_refused_push_is_one_line_naming_the_repository(run, fake_hub, monkeypatch, tmp_path, status, message):
    def refuse(self, repo_id, **_):
        response = SimpleNamespace(headers={}, status_code=status, request=None)
        raise HfHubHTTPError(f"{status} Client Error\nfor url https://huggingface.co/api/repos", response=response)

    monkeypatch.setattr(fake_hub, "create_repo", refuse)
    with pytest.raises(SystemExit) as exit_info:
        hub_main(["push", str(export_of(run)), REPO])
    error = str(exit_info.value.code)
    assert error.startswith("error: ") and message in error and REPO in error and "\n" not in error
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_partial_test_is_said_in_the_card_and_not_published_as_the_models_result(run):
    """trainer.limit_test_batches scores the first batches only: the card says how many of the split's images, and
    its metadata holds no test result; the whole split's numbers are published (the shared run's test is whole)."""
    config = json.loads((export_of(run) / "config.json").read_text())
    scored = config["alternet"]["test_images"]
    assert scored["scored"] == scored["of"] == run.test_images.of and card_data(config).eval_results
    config["alternet"]["test_images"] = {"scored": 64, "of": 10000}
    assert "Measured on the first 64 of 10,000 images of the test split" in model_card(config)
    config["alternet"]["test_precision"] = "32-true"
    assert "at precision" not in model_card(config)
    config["alternet"]["test_precision"] = "bf16-mixed"
    assert "of `best-epoch000.ckpt` at precision bf16-mixed." in model_card(config)
    assert card_data(config).eval_results is None


def test_the_card_gives_the_learning_rate_trained_at(run):
    config = json.loads((export_of(run) / "config.json").read_text())
    info, recipe = config["alternet"], config["alternet"]["recipe"]
    info |= {"lr": recipe["optimizer"]["lr"] / 4, "global_batch": recipe["lr_scale_batch"] // 4}
    recipe["lr_scale_rule"] = "linear"
    expected = (
        f"lr {info['lr']:.4g} (recipe.optimizer.lr {recipe['optimizer']['lr']} for a global batch of "
        f"{recipe['lr_scale_batch']}, scaled linear to the {info['global_batch']} trained)"
    )
    assert expected in model_card(config)
    info["lr"] = recipe["optimizer"]["lr"]  # trained at the recipe's rate (or an export of before it was recorded)
    assert f"lr {recipe['optimizer']['lr']}, weight decay" in model_card(config)


def test_the_card_says_when_test_numbers_averaged_mirrored_views(run):
    """A timm user runs one view per image; the card must not let flip-averaged numbers pass for single-view ones."""
    config = json.loads((export_of(run) / "config.json").read_text())
    assert "recipe.test_flip" not in model_card(config)
    config["alternet"]["recipe"]["test_flip"] = True
    assert "averaged the logits of the image and its mirror image (`recipe.test_flip`)" in model_card(config)


def test_a_folder_mixing_two_exports_is_refused_by_load_evaluate_and_push(run, fake_hub, tmp_path, monkeypatch, capsys):
    """An export records its weights' digest in config.json: weights copied over another export's (each file valid
    on its own) are refused in one line by every reader, before anything is scored or uploaded."""
    from safetensors.torch import load_file, save_file

    from alternet.runs.checkpoints import DIGEST_KEY, weights_digest

    from helpers.processes import run_command

    mixed = tmp_path / "mixed"
    shutil.copytree(export_of(run), mixed)
    other = {name: tensor + 1 for name, tensor in load_file(mixed / "model.safetensors").items()}
    save_file(other, str(mixed / "model.safetensors"), metadata={"format": "pt", DIGEST_KEY: weights_digest(other)})
    says = f"{mixed} mixes the files of two exports: its config.json describes other weights than its model.safetensors"
    with pytest.raises(CheckpointError, match="^" + says):
        hub.load(mixed)
    code, stderr = run_command(["evaluate", f"ckpt={mixed}", f"out_dir={tmp_path / 'eval'}"], monkeypatch, capsys)
    assert code.startswith(f"error: {says}") and "\n" not in code and "Traceback" not in stderr
    with pytest.raises(SystemExit) as exited:
        hub_main(["push", str(mixed), REPO])
    assert str(exited.value.code).startswith(f"error: {says}")
    assert fake_hub.calls == []
    hub.load(export_of(run))  # the export it was copied from reads as before


@pytest.mark.parametrize("weights", ["model.safetensors without its digest", "pytorch_model.bin"])
def test_weights_of_another_export_without_a_digest_of_their_own_are_refused(run, tmp_path, weights):
    """config.json records its weights' digest: weights that carry none (metadata stripped, a torch file) are
    checked against it by their own tensors, not taken with this config's labels and normalisation."""
    from safetensors.torch import load_file, save_file

    mixed = tmp_path / "mixed"
    shutil.copytree(export_of(run), mixed)
    other = {name: tensor + 1 for name, tensor in load_file(mixed / "model.safetensors").items()}
    if weights == "pytorch_model.bin":
        (mixed / "model.safetensors").unlink()
        torch.save(other, mixed / "pytorch_model.bin")
    else:
        save_file(other, str(mixed / "model.safetensors"), metadata={"format": "pt"})
    file = "pytorch_model.bin" if weights == "pytorch_model.bin" else "model.safetensors"
    with pytest.raises(CheckpointError, match=f"^{mixed} mixes the files of two exports: .* than its {file} holds"):
        hub.load(mixed)


def test_an_exports_pretrained_cfg_is_its_training_datas_not_the_registrys_weights():
    """A timm architecture trained here: its registry entry describes other weights (resnet50.a1_in1k is scored at
    288 px, crop 1.0, bicubic); timm's validate.py would feed a 32-px CIFAR model those. The export's cfg is the
    data's: arrays whole, an image folder's evaluation resize as it ran."""
    from alternet.dataset_facts import DataFacts
    from alternet.hub.sources import data_pretrained_cfg

    cifar = DataFacts("cifar100", 100, 32, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    cfg = data_pretrained_cfg("resnet50", cifar)
    assert "test_input_size" not in cfg and "test_crop_pct" not in cfg and "license" not in cfg
    assert (cfg["input_size"], cfg["crop_pct"], cfg["crop_mode"]) == ([3, 32, 32], 1.0, "center")
    folder = DataFacts("imagefolder", 10, 64, (0.5,) * 3, (0.25,) * 3, crop_pct=0.9, crop_mode="squash",
                       interpolation="bicubic")  # fmt: skip
    cfg = data_pretrained_cfg("resnet50", folder)
    assert (cfg["crop_pct"], cfg["crop_mode"], cfg["interpolation"]) == (0.9, "squash", "bicubic")


def test_weights_that_share_no_name_with_the_model_are_refused_not_left_at_initialisation(tmp_path):
    """model.pretrained=SOURCE of another family: nothing loads, and the run would train from random weights with
    only a warning to say so."""
    from safetensors.torch import save_file

    from alternet.models import create_model

    save_file({"features.0.weight": torch.zeros(4, 3, 3, 3)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(
        CheckpointError, match=r"no tensor of .*other\.safetensors fits this alternet_tiny: none of its 1"
    ):
        hub.load_pretrained(create_model("alternet_tiny", num_classes=10), tmp_path / "other.safetensors")


def test_exporting_or_pushing_bare_weights_says_what_to_pass(run, fake_hub, tmp_path):
    """A .safetensors file was read as a torch file: "not a torch checkpoint ... or another format"."""
    weights = tmp_path / "weights.safetensors"
    shutil.copy(export_of(run) / "model.safetensors", weights)
    says = "holds weights alone (no architecture, classes or data): pass the run directory"
    with pytest.raises(CheckpointError, match=re.escape(f"{weights} {says}")):
        hub.export(weights, tmp_path / "export")
    with pytest.raises(SystemExit) as exited:
        hub_main(["push", str(weights), REPO])
    assert says in str(exited.value.code) and fake_hub.calls[1:] == []


def test_an_export_whose_config_says_no_class_count_is_one_line(run, tmp_path):
    edited = tmp_path / "edited"
    shutil.copytree(export_of(run), edited)
    config = json.loads((edited / "config.json").read_text())
    (edited / "config.json").write_text(json.dumps(config | {"num_classes": "ten"}))
    with pytest.raises(CheckpointError, match=r"config\.json says num_classes='ten', not a class count"):
        hub.load(edited)


def test_the_card_says_a_model_trained_on_a_subset_of_its_data(run):
    """An export of a data.subset=0.02 run read "Data set: cifar100" alone."""
    config = json.loads((export_of(run) / "config.json").read_text())
    assert "subset" not in config["alternet"]["data"] and "data.subset" not in model_card(config)
    config["alternet"]["data"]["subset"] = 0.02
    assert "classes (trained on a seeded 0.02 of its training split: data.subset)" in model_card(config)


def edited_export(run, tmp_path: Path, edit) -> Path:
    """A copy of the shared run's export whose config.json ``edit`` changed by hand."""
    export = tmp_path / "edited"
    shutil.copytree(export_of(run), export)
    config = json.loads((export / "config.json").read_text())
    edit(config)
    (export / "config.json").write_text(json.dumps(config))
    return export


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (  # its label names cut alike: a config that agrees with itself, not with its weights
            lambda c: c.update(num_classes=3, label_names=c["label_names"][:3]),
            "its config and weights do not belong together",
        ),
        (lambda c: c["model_args"].update(widths=[8, 16, 48]), "does not load as its config.json says"),
        (lambda c: c.update(architecture="resnet18"), "builds resnet18 with layout="),
    ],
    ids=["num_classes", "widths", "architecture"],
)
def test_push_refuses_an_export_whose_config_no_longer_fits_its_weights(run, fake_hub, tmp_path, edit, said):
    """Its digest still matched, so it was uploaded: one that timm cannot load (checked by building it, as
    import-hdvw reads back what it wrote)."""
    export = edited_export(run, tmp_path, edit)
    with pytest.raises(hub.PushError, match=r"does not load as its config\.json says") as refused:
        hub.push_to_hub(export, REPO)
    assert said in str(refused.value) and "nothing was uploaded" in str(refused.value)
    assert fake_hub.calls == []


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda c: c.update(label_names=["a", "b"]), "names 2 classes in label_names for a head of 10: they cannot"),
        (lambda c: c["pretrained_cfg"].update(mean=[0.5], std=[0, 0, 0]), "says mean=[0.5], std=[0, 0, 0]: a model's"),
        (lambda c: c["pretrained_cfg"].update(std=[0.2, -0.2, 0.2]), "std=[0.2, -0.2, 0.2]: a model's normalisation"),
        (lambda c: c["pretrained_cfg"].update(mean="imagenet"), "says mean='imagenet', std="),
    ],
    ids=["label_names", "mean-and-std", "negative-std", "mean-no-list"],
)
def test_an_export_whose_config_names_other_classes_or_no_normalisation_is_refused_by_load_and_push(
    run, fake_hub, tmp_path, edit, said
):
    """A config.json edited to 2 label names for a head of 10 loaded (class 8 had no name), and one with a std of 0
    loaded, then failed in torchvision's Normalize; push went on to upload either."""
    export = edited_export(run, tmp_path, edit)
    with pytest.raises(CheckpointError, match=re.escape(said)):
        hub.load(export)
    with pytest.raises(SystemExit) as exited:
        hub_main(["push", str(export), REPO])
    assert said in str(exited.value.code) and "\n" not in str(exited.value.code)
    assert fake_hub.calls == []


def test_push_refuses_a_card_that_contradicts_its_export_and_keeps_one_that_agrees(run, fake_hub, tmp_path):
    """A card copied from another export (another data set, other results) or left behind by a config edit (a new
    licence) was uploaded as the user's own card; one whose prose alone was edited still is."""
    export = edited_export(run, tmp_path, lambda c: c["pretrained_cfg"].update(license="cc-by-4.0"))
    with pytest.raises(
        hub.PushError, match=r"contradicts its config\.json \(license: the card says 'mit', the config "
    ):
        hub.push_to_hub(export, REPO)
    config = json.loads((export_of(run) / "config.json").read_text())
    other = json.loads(json.dumps(config))
    other["alternet"]["data"]["name"] = "cifar10"
    export = tmp_path / "other-card"
    shutil.copytree(export_of(run), export)
    (export / "README.md").write_text(model_card(other))
    with pytest.raises(hub.PushError, match=r"datasets: the card says \['uoft-cs/cifar10'\], the config \['digits'\]"):
        hub.push_to_hub(export, REPO)
    assert fake_hub.calls == []
    (export / "README.md").write_text(model_card(config).replace("## Usage", "## My notes\n\nMine.\n\n## Usage"))
    hub.push_to_hub(export, REPO)
    assert "## My notes" in (fake_hub.remote / REPO / "README.md").read_text()


def test_push_of_a_folder_timm_saved_is_one_line(run, fake_hub, tmp_path):
    """timm's save_for_hf writes no alternet section: push read the card's facts from it (a KeyError)."""
    export = edited_export(run, tmp_path, lambda c: c.pop("alternet"))
    with pytest.raises(hub.PushError, match=r"is not an alternet export \(its config\.json has no alternet section"):
        hub.push_to_hub(export, REPO)
    assert fake_hub.calls == []


def test_an_export_of_a_newer_format_or_with_arguments_its_model_lacks_is_one_line(run, tmp_path):
    """An export written by a later alternet: its format was not read, and a model argument this one's architecture
    lacks was a TypeError from the constructor."""
    export = edited_export(run, tmp_path, lambda c: c["alternet"].update(format=2))
    with pytest.raises(CheckpointError, match=r"is in export format 2, which this alternet .* written by a newer"):
        hub.load(export)
    shutil.rmtree(export)
    export = edited_export(run, tmp_path, lambda c: c["model_args"].update(new_feature=True))
    with pytest.raises(
        CheckpointError, match=r"builds alternet_tiny with new_feature=True, an argument alternet_tiny "
    ):
        hub.load(export)
    with pytest.raises(ConfigValueError, match=r"^alternet_tiny takes no argument colour$"):
        hub.load(export_of(run), colour=1)


def test_the_licence_is_the_exporters_choice_and_hdvws_own_for_its_weights(run, tmp_path):
    out = hub.export(run.run_dir, tmp_path / "licensed", license_id="cc-by-4.0")
    assert ModelCard.load(out / "README.md").data.license == "cc-by-4.0"
    with pytest.raises(CheckpointError, match=r"--license 'CC BY' is not a Hugging Face Hub licence identifier"):
        hub.export(run.run_dir, tmp_path / "refused", license_id="CC BY")
    assert not (tmp_path / "refused").exists()


def test_a_checkpoint_copied_in_from_another_run_is_not_exported_with_this_runs_results(run, tmp_path):
    """Its card said the checkpoint's data and this run's recipe and test results: a mix of two runs."""
    copied = tmp_path / "run"
    shutil.copytree(run.run_dir, copied, ignore=shutil.ignore_patterns("export", "wandb"))
    recorded = copied / "config.yaml"
    config = OmegaConf.load(recorded)
    config.data.name = "cifar100"  # the run this folder records trained on other data
    OmegaConf.save(config, recorded)
    with pytest.raises(CheckpointError, match=r"trained data 'digits', but its run directory .* records data=cifar100"):
        hub.export(copied, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_top5_accuracy_is_left_out_of_the_card_of_a_model_of_five_classes_or_fewer(run):
    """It is 1 by construction there (counted at min(5, classes)), and the model-index published it as a result."""
    config = json.loads((export_of(run) / "config.json").read_text())
    assert "Top-5 accuracy" in model_card(config)  # digits: 10 classes
    config["num_classes"] = 3
    card = model_card(config)
    assert "Top-5 accuracy" not in card and "top_5_accuracy" not in card and "Top-1 accuracy" in card


def test_a_new_head_does_not_keep_the_sources_class_names(run):
    """timm's pretrained_cfg kept the ten digit names and num_classes=10 on a 3-class model."""
    model = hub.load(export_of(run), num_classes=3)
    assert model.num_classes == 3 and model.pretrained_cfg["num_classes"] == 3
    assert not model.pretrained_cfg.get("label_names")
    assert len(hub.load(export_of(run)).pretrained_cfg["label_names"]) == 10


@pytest.mark.parametrize(
    ("weights", "into"), [("vit_mini_cifar", "pit_mini_cifar"), ("pit_mini_cifar", "vit_mini_cifar")]
)
def test_a_vits_weights_into_a_pit_and_back_are_refused_in_one_line(tmp_path, weights, into):
    """timm's position-table filter raised on the other family's tensors: a bare ValueError or RuntimeError."""
    from safetensors.torch import save_file

    path = tmp_path / "weights.safetensors"
    save_file(alternet.models.create_model(weights, num_classes=10).state_dict(), str(path))
    model = alternet.models.create_model(into, num_classes=10)
    with pytest.raises(
        CheckpointError, match=rf"does not fit this {into}: its position tables cannot be resized to it"
    ):
        hub.load_pretrained(model, path)


def test_weights_of_other_widths_name_the_overrides_that_build_their_model(run):
    """The refusal advised alternet.hub.load, a Python function, to a user of alternet train."""
    model = alternet.models.create_model("alternet_tiny", num_classes=10, img_size=16, widths=[16, 32, 64])
    with pytest.raises(CheckpointError, match=r"do not fit the model outside its classifier head") as refused:
        hub.load_pretrained(model, export_of(run))
    assert 'It was built with "model.layout=\'C|CM|CM\'" model.block=basic "model.widths=[32,64,128]"' in str(
        refused.value
    )


def test_relative_position_tables_of_other_windows_say_which_input_size_builds_them(run):
    """At 24 px (window 6) the refusal asked whether the weights were of another architecture: they are not."""
    model = alternet.models.create_model("alternet_tiny", num_classes=10, img_size=24, window=6)
    with pytest.raises(CheckpointError, match=r"sized by its attention windows, .* data.image_size=16, builds them"):
        hub.load_pretrained(model, export_of(run))


def test_the_card_of_a_fine_tuned_model_says_where_its_weights_started(run):
    """It said 'trained on digits with alternet' for a linear probe on the paper authors' weights."""
    config = json.loads((export_of(run) / "config.json").read_text())
    assert "Initialised from" not in model_card(config)
    config["alternet"]["model"]["pretrained"] = "hdvw:vit_ti_cifar100.pth.tar"
    config["alternet"]["recipe"]["finetune"] = {"freeze_backbone": True, "backbone_lr_scale": 1.0}
    assert "- Initialised from `hdvw:vit_ti_cifar100.pth.tar` (a linear probe: the backbone frozen" in model_card(
        config
    )


def test_an_export_missing_its_config_is_said_to_be(run, tmp_path):
    export = tmp_path / "export"
    shutil.copytree(export_of(run), export)
    (export / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"holds model.safetensors but no config.json: an export missing its"):
        hub.load(export)


def test_an_earlier_alternets_card_is_pushed_with_its_repository_named(run, fake_hub, tmp_path):
    """A card generated before this version (other wording; top-5 of a model of 5 classes or fewer) was refused as
    'another model's card', or uploaded with its <user>/<repo> placeholder."""
    config = json.loads((export_of(run) / "config.json").read_text())
    few = json.loads(json.dumps(config)) | {"num_classes": 3}
    push_module._check_card_agrees(tmp_path, model_card(config), few, REPO)  # its top-5 no contradiction
    export = tmp_path / "earlier"
    shutil.copytree(export_of(run), export)
    (export / "README.md").write_text(model_card(config).replace("## Usage", "## How to load"))
    hub.push_to_hub(export, REPO)
    pushed = (fake_hub.remote / REPO / "README.md").read_text()
    assert "## How to load" in pushed and "<user>/<repo>" not in pushed and f"hf-hub:{REPO}" in pushed
    lic = tmp_path / "licence-in-card"
    shutil.copytree(export_of(run), lic)
    (lic / "README.md").write_text(model_card(config).replace("license: mit", "license: cc-by-4.0"))
    with pytest.raises(hub.PushError, match=r"or a licence set in the card alone; .* --license ID sets the licence"):
        hub.push_to_hub(lic, REPO)


def test_another_architectures_weights_are_named_as_its_not_given_its_overrides():
    """A ViT's run as model.pretrained of a Swin: the refusal listed the ViT's arguments as overrides for the Swin,
    which refused them (model.depth is not a key of model)."""
    from alternet.hub.loading import apply_weights
    from alternet.hub.sources import Source

    vit = alternet.models.create_model("vit_mini_cifar", num_classes=10)
    swin = alternet.models.create_model("swin_mini_cifar", num_classes=10)
    source = Source("runs/vit", vit.state_dict(), "vit_mini_cifar", 10, {"depth": 4})
    with pytest.raises(CheckpointError) as refused:
        apply_weights(swin, source)
    message = str(refused.value)
    assert message.endswith("They are vit_mini_cifar's: build that architecture (model=vit_mini_cifar)")
    assert "model.depth" not in message


def test_the_card_names_the_model_as_its_run_recorded_it(run):
    """A run of alternet_tiny with another layout was alternet_tiny[layout=...] in metrics.json and W&B, and
    plain alternet_tiny in its card's title and model-index name: two architectures under one name."""
    config = json.loads((export_of(run) / "config.json").read_text())
    assert model_card(config).count("alternet_tiny on digits") == 1  # the named model, as it was
    config["alternet"]["model"]["layout"] = "C|CC|CM"
    card = model_card(config)
    assert "# alternet_tiny[layout=C|CC|CM] on digits" in card and "alternet_tiny[layout=C|CC|CM]-digits" in card
