"""The embedder's arithmetic: `auto` picks bfloat16 only where the processor has it natively, and bfloat16
vectors of the bundled model stay what float32 gives, to cosine 0.999."""

import numpy as np
import pytest

from hygraph.backends import cpu_flags, resolve_precision
from hygraph.backends.embedder import make_embedder
from hygraph.config import EmbedderConfig


def test_auto_takes_bfloat16_only_with_native_support():
    assert resolve_precision("auto", "cpu", frozenset({"avx2", "avx512_bf16"})) == "bfloat16"
    assert resolve_precision("auto", "cpu", frozenset({"amx_bf16", "amx_tile"})) == "bfloat16"
    assert resolve_precision("auto", "cpu", frozenset({"avx2", "avx512f", "avx512bw"})) == "float32"
    assert resolve_precision("auto", "cpu", frozenset()) == "float32"
    assert resolve_precision("float32", "cpu", frozenset({"avx512_bf16"})) == "float32"
    assert resolve_precision("bfloat16", "cpu", frozenset()) == "bfloat16"


def test_cpu_flags_read_the_flags_line_and_nothing_when_unreadable(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512_bf16\nbugs\t: none\n")
    assert cpu_flags(str(info)) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()


def test_config_rejects_an_unknown_precision():
    with pytest.raises(ValueError, match="precision"):
        EmbedderConfig(precision="int8")


def test_bfloat16_vectors_match_float32_ones():
    texts = ["Which magazine was started first, Arthur's Magazine or First for Women?",
             "Arthur's Magazine (1844-1846) was an American literary periodical published in Philadelphia. " * 12,
             "東京 is the capital of Japan.", "x"]
    full = make_embedder(EmbedderConfig(precision="float32", device="cpu", runtime="torch"))
    half = make_embedder(EmbedderConfig(precision="bfloat16", device="cpu"))
    assert (full.precision, half.precision) == ("float32", "bfloat16")
    a, b = full.encode(texts), half.encode(texts)
    assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    assert (a * b).sum(axis=1).min() > 0.999
    assert not np.array_equal(a, b)  # the bfloat16 products did run


def test_encode_gives_sentence_transformers_vectors_in_input_order():
    texts = ["x", "Arthur's Magazine (1844-1846) was an American literary periodical. " * 40,
             "Which magazine was started first?", "東京 is the capital of Japan.",
             "Teutberga (died 11 November 875) was a queen of Lotharingia by marriage to Lothair II.", "a b"]
    embedder = make_embedder(EmbedderConfig(precision="float32", device="cpu", batch_size=2, runtime="torch"))
    ours = embedder.encode(texts)  # three slices, each sorted by length
    reference = embedder.model.encode(texts, normalize_embeddings=True)
    assert ours.dtype == np.float32 and ours.shape == (len(texts), embedder.dim) and ours.flags.c_contiguous
    assert (ours * reference).sum(axis=1).min() >= 0.99999
    assert embedder.encode([]).shape == (0, embedder.dim)


def test_the_onnx_runtime_gives_the_torch_vectors_without_torch_arithmetic():
    """The CPU default (embedder.runtime auto -> onnx): the exported graph, the model's own tokenizer (truncated at
    its 256 tokens), mean pooling over the mask and normalization give sentence-transformers' vectors."""
    from hygraph.backends.onnx_embedder import OnnxEmbedder

    texts = ["x", "Arthur's Magazine (1844-1846) was an American literary periodical. " * 40,
             "Which magazine was started first?", "東京 is the capital of Japan.", "a b"]
    onnx = make_embedder(EmbedderConfig(precision="float32", device="cpu", batch_size=2), workload="questions")
    torch_model = make_embedder(EmbedderConfig(precision="float32", device="cpu", runtime="torch"))
    assert isinstance(onnx, OnnxEmbedder) and (onnx.dim, onnx.max_seq_length) == (384, 256)
    a, b = onnx.encode(texts), torch_model.encode(texts)
    assert a.dtype == np.float32 and a.shape == b.shape and (a * b).sum(axis=1).min() > 0.99999
    assert onnx.encode([]).shape == (0, 384)
    # Batches of passages stay in torch under `auto`: faster there.
    assert not isinstance(make_embedder(EmbedderConfig(precision="float32", device="cpu")), OnnxEmbedder)
    # Questions one by one go to ONNX under `precision: auto` whatever the processor (with native bfloat16,
    # torch's bfloat16 is 1.9x ONNX's CPU per question); an explicit bfloat16 stays in torch.
    assert isinstance(make_embedder(EmbedderConfig(device="cpu"), workload="questions"), OnnxEmbedder)
    assert not isinstance(make_embedder(EmbedderConfig(precision="bfloat16", device="cpu"), workload="questions"),
                          OnnxEmbedder)
    # Batches of short texts (the build's knowledge texts): ONNX in float32, torch where the arithmetic is bfloat16.
    assert isinstance(make_embedder(EmbedderConfig(precision="float32", device="cpu"), workload="short"), OnnxEmbedder)
    assert not isinstance(make_embedder(EmbedderConfig(precision="bfloat16", device="cpu"), workload="short"),
                          OnnxEmbedder)


def test_length_groups_cut_where_padding_costs_more_than_a_call():
    from hygraph.backends.onnx_embedder import length_groups

    assert length_groups([], 16) == []
    assert length_groups([20] * 16, 16) == [(0, 16)]  # equal lengths: one call
    assert length_groups([20] * 16, 8) == [(0, 8), (8, 16)]  # never more than max_batch a call
    # One 45-token question padding three of 10 costs 17 + 4*45*(1 + 45/256) = 228.6 token units; apart,
    # 17 + 45*1.18 = 69.9 and 17 + 3*10*1.04 = 48.2.
    assert length_groups([45, 10, 10, 10], 16) == [(0, 1), (1, 4)]
    assert length_groups([21, 20, 20, 19], 16) == [(0, 4)]  # a token of padding is cheaper than a call
    groups = length_groups([60, 58, 40, 39, 38, 12, 11, 11, 10, 3], 64)
    assert groups == sorted(groups) and groups[0][0] == 0 and groups[-1][1] == 10
    assert all(a[1] == b[0] for a, b in zip(groups, groups[1:]))


def test_onnx_batches_give_each_text_its_own_vector():
    """Texts of mixed lengths in one call list are cut by length (`length_groups`): each gets the vector it
    gets alone, in input order."""
    texts = ["Who directed the film that won the award for best picture in 1999, and where was he born?", "Rome",
             "x", "Which magazine was started first, Arthur's Magazine or First for Women?", "Publix, Holy See",
             "Arthur's Magazine (1844-1846) was an American literary periodical. " * 10]
    onnx = make_embedder(EmbedderConfig(precision="float32", device="cpu", batch_size=4), workload="questions")
    together = onnx.encode(texts)
    alone = np.stack([onnx.encode([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=2e-6)


def test_int8_question_weights_are_quantized_once_for_questions_only(tmp_path):
    """`embedder.question_weights: int8`: the question encoder runs a quantized copy of the exported graph, made
    once next to it; its vectors stay close to float32's (the ranked passages may change: opt-in), and nothing
    but the question workload uses it."""
    from hygraph.backends.onnx_embedder import OnnxEmbedder
    from hygraph.errors import ConfigError

    texts = ["Which magazine was started first, Arthur's Magazine or First for Women?", "a b",
             "Who directed the film that won the award in 1999?"]
    cfg = EmbedderConfig(precision="float32", device="cpu", onnx_dir=str(tmp_path), question_weights="int8")
    q8 = make_embedder(cfg, workload="questions")
    assert isinstance(q8, OnnxEmbedder) and q8.precision == "int8"
    assert sorted(p.name for p in tmp_path.glob("*/*.onnx")) == ["model.int8.onnx", "model.onnx"]
    f32 = make_embedder(cfg, workload="short")
    assert f32.precision == "float32"
    a, b = q8.encode(texts), f32.encode(texts)
    cos = (a * b).sum(axis=1)
    assert a.dtype == np.float32 and 0.98 < cos.min() < 0.99999  # close, and really quantized
    with pytest.raises(ConfigError, match="question_weights"):
        make_embedder(EmbedderConfig(precision="bfloat16", device="cpu", question_weights="int8"),
                      workload="questions")


def test_only_mean_pooled_transformers_run_in_onnx(tmp_path):
    import json

    from hygraph.backends.onnx_embedder import exportable

    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "1_Pooling").mkdir()
    modules = [{"path": "", "type": "sentence_transformers.models.Transformer"},
               {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    pooling = {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False}
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    assert exportable(tmp_path)
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "pooling_mode_cls_token": True}))
    assert not exportable(tmp_path)
    (tmp_path / "modules.json").write_text(json.dumps(modules[:1]))
    assert not exportable(tmp_path)
