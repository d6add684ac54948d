import pickle
import re
from dataclasses import replace

import pytest

from hygraph.core.prompt import INSUFFICIENT, assemble_prompt
from hygraph.core.retrieval.context import Context, ContextItem, LazySources, LazyTextItem, Passage


def tokens(text: str) -> int:
    return len(text.split())


def prompt_tokens(prompt) -> int:
    return tokens(prompt.system) + tokens(prompt.user)


ITEMS = [
    ContextItem("doc-1", "chunk", "Passage about Prague Castle.", 0.90),
    ContextItem("prague castle", "entity", "Prague Castle", 0.70),
    ContextItem("L1:0", "summary", "Community of Czech landmarks.", 0.50),
    ContextItem("rel-1", "relation", "jan klapac born in prague", 0.60),
    ContextItem("he-1", "hyperedge", "Klapac was born in Prague in 1941.", 0.65),
    ContextItem("doc-2", "chunk", "Passage about Jan Klapac.", 0.95),
    ContextItem("L1:1", "summary", "Community of Czech athletes.", 0.80),
]


def test_sections_follow_the_paper_order_and_items_rank_within_a_section():
    prompt = assemble_prompt("Where was Jan Klapac born?", ITEMS)
    assert [it.kind for it in prompt.items] == [
        "summary", "summary", "entity", "relation", "hyperedge", "chunk", "chunk"]
    assert [it.id for it in prompt.items if it.kind == "chunk"] == ["doc-2", "doc-1"]
    headers = [line for line in prompt.user.splitlines() if line.startswith("## ")]
    assert headers == ["## Community summaries", "## Entities", "## Key relations",
                       "## Hyperedge facts", "## Source passages"]


def test_items_are_numbered_globally_and_the_numbers_appear_in_the_text():
    prompt = assemble_prompt("q?", ITEMS)
    assert [it.number for it in prompt.items] == list(range(1, len(ITEMS) + 1))
    for it in prompt.items:
        assert f"[{it.number}] (score {it.score:.3f}) {it.text}" in prompt.user
    assert re.findall(r"^\[(\d+)\]", prompt.user, flags=re.M) == [str(n) for n in range(1, 8)]


def test_instructions_ask_for_citations_and_insufficient_information():
    prompt = assemble_prompt("Where was Jan Klapac born?", ITEMS)
    assert INSUFFICIENT in prompt.system and INSUFFICIENT in prompt.user
    assert "cite" in prompt.system.lower()
    assert "Question: Where was Jan Klapac born?" in prompt.user
    assert prompt.user.index("## Source passages") < prompt.user.index("Question:")


def test_empty_context_still_carries_the_instruction():
    prompt = assemble_prompt("Who?", [])
    assert prompt.items == ()
    assert INSUFFICIENT in prompt.user and INSUFFICIENT in prompt.system
    assert "Question: Who?" in prompt.user


def ranked_ids(items) -> list[str]:
    return [it.id for it in sorted(items, key=lambda it: it.score, reverse=True)]


def test_budget_drops_lowest_scored_items_first_across_sections():
    full = prompt_tokens(assemble_prompt("q?", ITEMS))
    # 8 tokens over: the 0.50 summary line (7) is not enough, so the 0.60 relation and its header go too
    prompt = assemble_prompt("q?", ITEMS, max_tokens=full - 8)
    assert {it.id for it in prompt.items} == set(ranked_ids(ITEMS)[:5])
    assert {"L1:0", "rel-1"}.isdisjoint(it.id for it in prompt.items)
    assert [it.number for it in prompt.items] == [1, 2, 3, 4, 5]


def test_budget_is_respected_and_trims_strictly_by_score_at_every_size():
    full = prompt_tokens(assemble_prompt("q?", ITEMS))
    for budget in range(full + 1):
        prompt = assemble_prompt("q?", ITEMS, max_tokens=budget)
        kept = {it.id for it in prompt.items}
        assert kept == set(ranked_ids(ITEMS)[:len(kept)])
        if kept:
            assert prompt_tokens(prompt) <= budget
    assert len(prompt.items) == len(ITEMS)


def test_an_item_that_does_not_fit_is_dropped_whole():
    long_text = " ".join(f"w{i}" for i in range(50))
    items = [ContextItem("doc-1", "chunk", long_text, 0.9), ContextItem("e", "entity", "Prague", 0.5)]
    base = prompt_tokens(assemble_prompt("q?", []))
    prompt = assemble_prompt("q?", items, max_tokens=base + 30)
    # the lower-scored entity would fit, but trimming never skips over a better item
    assert prompt.items == ()
    assert "w0" not in prompt.user
    assert INSUFFICIENT in prompt.user
    roomy = assemble_prompt("q?", items, max_tokens=base + 100)
    assert long_text in roomy.user


def test_best_passage_is_kept_ahead_of_higher_scored_other_kinds():
    items = [
        ContextItem("L1:0", "summary", " ".join(["s"] * 40), 0.99),
        ContextItem("doc-1", "chunk", "The answer is here.", 0.40),
        ContextItem("doc-2", "chunk", "Another passage.", 0.30),
    ]
    base = prompt_tokens(assemble_prompt("q?", []))
    prompt = assemble_prompt("q?", items, max_tokens=base + 15)
    assert [it.id for it in prompt.items] == ["doc-1"]


def test_oversized_best_passage_gives_way_to_higher_scored_items_that_fit():
    items = [
        ContextItem("doc-1", "chunk", " ".join(["w"] * 100), 0.9),
        ContextItem("prague", "entity", "Prague", 0.95),
    ]
    base = prompt_tokens(assemble_prompt("q?", []))
    prompt = assemble_prompt("q?", items, max_tokens=base + 10)
    assert [it.id for it in prompt.items] == ["prague"]


def test_custom_token_counter_is_used():
    assert len(assemble_prompt("q?", ITEMS, max_tokens=800).items) == len(ITEMS)
    by_chars = assemble_prompt("q?", ITEMS, max_tokens=800, count_tokens=len)
    assert 0 < len(by_chars.items) < len(ITEMS)


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="unknown context kind"):
        assemble_prompt("q?", [ContextItem("x", "table", "x", 1.0)])  # type: ignore[arg-type]


def test_a_context_cut_to_its_prompt_keeps_the_numbered_items_by_kind_and_counts_the_rest():
    ctx = Context(
        chunks=[ContextItem(f"c{i}", "chunk", "passage text " * 50, 1.0 - i / 10, (f"d{i}",)) for i in range(4)],
        entities=[ContextItem(f"e{i}", "entity", f"entity {i}", 0.9 - i / 100) for i in range(30)],
        passages=[Passage("d0", "D0", 1.0)], notes={"route": "bridge"})
    prompt = assemble_prompt("q?", ctx.items(), max_tokens=400)
    cut = ctx.numbered(prompt.items)
    assert [i.number for i in cut.entities + cut.chunks] == list(range(1, len(prompt.items) + 1))
    assert {i.id for i in cut.items()} == {i.id for i in prompt.items}
    assert len(cut.items()) < len(ctx.items())  # the budget dropped some
    assert cut.passages == ctx.passages
    assert cut.notes == {"route": "bridge", "retrieved": {"summaries": 0, "chunks": 4, "entities": 30,
                                                          "relations": 0, "hyperedges": 0}}


def test_lazy_sources_are_computed_only_for_the_items_the_budget_keeps():
    computed: list[str] = []

    def sources_of(item_id: str) -> LazySources:
        return LazySources(lambda: computed.append(item_id) or (f"p-{item_id}",))

    items = [ContextItem("doc-1", "chunk", "Passage about Prague Castle.", 0.9, ("doc-1",)),
             *(ContextItem(f"e{i}", "entity", f"Entity number {i}", 0.8 - i / 100, sources_of(f"e{i}"))
               for i in range(40))]
    empty = prompt_tokens(assemble_prompt("q?", [], count_tokens=tokens))
    prompt = assemble_prompt("q?", items, max_tokens=empty + 60, count_tokens=tokens)
    kept = [it for it in prompt.items if it.kind == "entity"]
    assert 0 < len(kept) < 40
    assert computed == [it.id for it in sorted(kept, key=lambda it: it.number)]
    assert all(type(it.sources) is tuple and it.sources == (f"p-{it.id}",) for it in kept)


def test_lazy_sources_resolve_once_equal_any_sequence_of_the_ids_and_pickle_as_a_tuple():
    calls = []
    lazy = LazySources(lambda: calls.append(1) or ["p1", "p2"])
    assert calls == []
    assert lazy == ("p1", "p2") and lazy == ["p1", "p2"] and ("p1", "p2") == lazy and lazy != ("p1",)
    assert lazy != "p1p2"
    assert list(lazy) == ["p1", "p2"] and lazy[1] == "p2" and len(lazy) == 2
    assert calls == [1]
    restored = pickle.loads(pickle.dumps(ContextItem("e", "entity", "E", 0.5, lazy)))
    assert type(restored.sources) is tuple and restored.sources == ("p1", "p2")
    assert Context(entities=[ContextItem("e", "entity", "E", 0.5, lazy)]).to_dict()["entities"][0]["sources"] == \
        ("p1", "p2")


def test_lazy_sources_compute_from_a_shared_function_and_its_arguments():
    calls = []
    lazy = LazySources(lambda a, b: calls.append((a, b)) or [a, b], "p1", "p2")
    assert calls == [] and lazy == ("p1", "p2") and calls == [("p1", "p2")] and list(lazy) == ["p1", "p2"]
    assert calls == [("p1", "p2")]


def test_a_lazy_text_item_makes_its_text_once_on_read_and_is_otherwise_a_context_item():
    made = []

    def text_of(item_id: str) -> str:
        made.append(item_id)
        return f"text of {item_id}"

    item = LazyTextItem.deferred("e", "entity", text_of, 0.5, ("p1",), links=("a", "b"))
    other = LazyTextItem.deferred("f", "entity", text_of, 0.5, ("p1",))
    plain = ContextItem("e", "entity", "text of e", 0.5, ("p1",), links=("a", "b"))
    assert item != other and made == []  # ids differ: no text made to compare them
    assert item == plain and plain == item and made == ["e"]
    assert item.text == "text of e" and made == ["e"]
    assert Context(entities=[item]).to_dict() == Context(entities=[plain]).to_dict()
    copy = replace(item, number=3)
    assert copy.text == "text of e" and copy.number == 3 and copy == replace(plain, number=3)
    restored = pickle.loads(pickle.dumps(LazyTextItem.deferred("g", "entity", text_of, 0.25)))
    assert type(restored) is ContextItem and restored == ContextItem("g", "entity", "text of g", 0.25)


def test_the_budget_makes_the_text_of_the_lazy_items_it_reaches_only():
    made: list[str] = []

    def text_of(item_id: str) -> str:
        made.append(item_id)
        return f"Entity number {item_id}"

    items = [ContextItem("doc-1", "chunk", "Passage about Prague Castle.", 0.9, ("doc-1",)),
             *(LazyTextItem.deferred(f"e{i}", "entity", text_of, 0.8 - i / 100) for i in range(40))]
    empty = prompt_tokens(assemble_prompt("q?", [], count_tokens=tokens))
    prompt = assemble_prompt("q?", items, max_tokens=empty + 60, count_tokens=tokens)
    kept = [it for it in prompt.items if it.kind == "entity"]
    assert 0 < len(kept) < 40
    # The kept items and the first one that did not fit.
    assert made == [f"e{i}" for i in range(len(kept) + 1)]
    assert [it.text for it in kept] == [f"Entity number e{i}" for i in range(len(kept))]


def test_lazy_texts_whose_function_reads_many_are_made_in_blocks_of_the_items_the_budget_reaches():
    log: list[tuple[str, list[str]]] = []

    class Names:  # a text function that reads many ids at once (a served view's entity names)
        def __call__(self, item_id: str) -> str:
            log.append(("one", [item_id]))
            return f"Entity number {item_id}"

        def many(self, item_ids: list[str]) -> list[str]:
            log.append(("many", list(item_ids)))
            return [f"Entity number {i}" for i in item_ids]

    names = Names()
    items = [ContextItem("doc-1", "chunk", "Passage about Prague Castle.", 0.9, ("doc-1",)),
             *(LazyTextItem.deferred(f"e{i:03d}", "entity", names, 0.8 - i / 1000) for i in range(200))]
    items[3].text  # made already: not read again
    log.clear()
    empty = prompt_tokens(assemble_prompt("q?", [], count_tokens=tokens))
    prompt = assemble_prompt("q?", items, max_tokens=empty + 400, count_tokens=tokens)
    kept = [it for it in prompt.items if it.kind == "entity"]
    assert 64 < len(kept) < 128  # the budget stops within the second block
    # Ranked best first, the chunk leads: blocks of 64 ranked items, the chunk's and the made text left out.
    assert log == [("many", [f"e{i:03d}" for i in range(63) if i != 2]),
                   ("many", [f"e{i:03d}" for i in range(63, 127)])]
    assert [it.text for it in kept] == [f"Entity number e{i:03d}" for i in range(len(kept))]


def test_numbered_items_are_copies_as_replace_makes_them():
    text_of = {"e": "text of e", "f": "text of f"}.__getitem__
    items = [ContextItem("c", "chunk", "chunk text", 0.9, LazySources(lambda: ["p1"]), links=("x",)),
             LazyTextItem.deferred("e", "entity", text_of, 0.5, ("p2",), links=("a", "b")),
             LazyTextItem.deferred("f", "entity", text_of, 0.4, LazySources(lambda: ["p3", "p4"]))]
    expected = [replace(items[1], number=1, sources=("p2",)), replace(items[2], number=2, sources=("p3", "p4")),
                replace(items[0], number=3, sources=("p1",))]
    for max_tokens in (None, 10_000):  # without a budget no text is read before numbering
        fresh = [replace(it) if not isinstance(it, LazyTextItem) else
                 LazyTextItem.deferred(it.id, it.kind, text_of, it.score, it.sources, it.links) for it in items]
        got = assemble_prompt("q?", fresh, max_tokens=max_tokens).items
        assert list(got) == expected and [type(it) for it in got] == [type(it) for it in expected]
        assert [type(it.sources) for it in got] == [tuple] * 3 and got[0].text == "text of e"
        assert [it.number for it in fresh] == [0, 0, 0]  # the retrieved items are left as they were


def test_lazy_sources_of_one_compute_with_prepare_are_prepared_together_before_they_resolve():
    log = []

    class Passages:  # a compute that reads the passages of many items at once (hypergraph's chunks -> passages)
        def __call__(self, item_id):
            log.append(("call", item_id))
            return (f"p-{item_id}",)

        def prepare(self, calls):
            log.append(("prepare", [args[0] for args in calls]))

    passages = Passages()
    items = [ContextItem(f"e{i}", "entity", f"Entity {i}", 0.9 - i / 10, LazySources(passages, f"e{i}"))
             for i in range(3)]
    items.append(ContextItem("c", "chunk", "text", 0.1, LazySources(lambda: ("p-c",))))  # no prepare: as before
    items[1].sources[0]  # resolved already: not prepared again
    log.clear()
    prompt = assemble_prompt("q?", items)
    assert log == [("prepare", ["e0", "e2"]), ("call", "e0"), ("call", "e2")]
    assert [it.sources for it in prompt.items] == [("p-e0",), ("p-e1",), ("p-e2",), ("p-c",)]
