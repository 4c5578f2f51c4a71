"""A recheck fingerprint of an MLX candidate on the real mlx_lm.server install (the provisioned MLX venv; no
server is started): the venv's package versions, the interpreter's sha256 and the model dir's hash."""

from __future__ import annotations

from benchd.sensors import facts
from benchd.servers.fingerprint import take_fingerprint


def test_mlx_fingerprint_names_the_venv_packages(mlx_argv, tiny_models, cache_dir) -> None:  # type: ignore[no-untyped-def]
    from benchd.config import Config
    from benchd.schemas import Candidate

    config = Config.resolve(cache_dir=cache_dir)
    python = mlx_argv["mlx_lm.server"][0]
    cand = Candidate(id="m", runtime="mlx_lm.server", model=str(tiny_models.mlx_dir), binary=python)
    fp = take_fingerprint(cand, config, "test")
    assert fp.packages["mlx-lm"] == "0.32.2" and fp.packages["mlx"] == "0.32.4", fp.packages
    assert fp.version == "mlx-lm 0.32.2, mlx 0.32.4" and fp.binary_sha256 and fp.binary_realpath
    assert fp.model_sha256 == facts.hash_model(tiny_models.mlx_dir).sha256
