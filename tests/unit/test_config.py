from pathlib import Path

import pytest

from hygraph.config import load_config
from hygraph.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_local_profile_is_embedded_default():
    cfg = load_config(REPO / "configs/local.yaml", env={})
    assert cfg.vector_store.backend == "milvus" and cfg.vector_store.uri == "embedded"
    from hygraph.config import VectorStoreConfig

    assert VectorStoreConfig().uri == "embedded"  # the built-in default is the same embedded engine
    assert cfg.llm.backend == "extractive" and cfg.embedder.model == "bundled"
    assert (cfg.chunking.size_tokens, cfg.chunking.overlap_tokens) == (1200, 100)
    assert (cfg.hierarchy.num_hyperplanes, cfg.hierarchy.s_min, cfg.hierarchy.s_max) == (16, 5, 50)
    assert cfg.serve.host == "127.0.0.1"


def test_unknown_key_is_named(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("vector_store:\n  urii: http://x\n")
    with pytest.raises(ConfigError, match=r"vector_store\.urii: unknown key"):
        load_config(p, env={})


def test_wrong_type_is_named(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("retrieval:\n  top_k: many\n")
    with pytest.raises(ConfigError, match=r"retrieval\.top_k"):
        load_config(p, env={})


def test_env_override_parses_yaml_values(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("profile: x\n")
    cfg = load_config(p, env={"HYGRAPH__VECTOR_STORE__URI": "http://milvus:19530",
                              "HYGRAPH__RETRIEVAL__TOP_K": "9", "OTHER": "1"})
    assert cfg.vector_store.uri == "http://milvus:19530"
    assert cfg.retrieval.top_k == 9


def test_env_override_unknown_key_fails(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("{}\n")
    with pytest.raises(ConfigError, match="retrieval.nope"):
        load_config(p, env={"HYGRAPH__RETRIEVAL__NOPE": "1"})


def test_missing_explicit_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent.yaml", env={})


def test_index_hash_ignores_serving_knobs(tmp_path):
    a = load_config(REPO / "configs/local.yaml", env={})
    b = load_config(REPO / "configs/local.yaml", env={"HYGRAPH__SERVE__PORT": "9001"})
    c = load_config(REPO / "configs/local.yaml", env={"HYGRAPH__CHUNKING__SIZE_TOKENS": "200"})
    # int8 question weights change only the Retrievers' question vectors, never a stored one.
    d = load_config(REPO / "configs/local.yaml", env={"HYGRAPH__EMBEDDER__QUESTION_WEIGHTS": "int8"})
    assert a.index_hash() == b.index_hash() == d.index_hash() != c.index_hash()
