"""A version load's derived structures: full derive against the patch from the previous version's (store/delta.py).

    python loadtests/bench_derive.py --index-dir /tmp/bb/index_m2v_20000 --work /tmp/bench_derive [--s3]

The index is never written: its manifests are copied and its segments hard-linked into `--work` (with `--s3`:
uploaded to a SeaweedFS server started on loopback, every segment left in the node's cache as on a node that
served the version before, so that only the new versions' segments are fetched), where two
versions are published on top of its current one, as the serving updater writes them (one segment per changed
artifact, a changed graph node's whole neighbour list): a single-document insert (a copy of one document under
a new id, linked to the same neighbours, whose rows are rewritten) and then a single-document delete. For each,
the reader's `structures()` (derive or patch, write the node-shared files, map them) is timed with no files of
that version on the node: in full (no earlier version's files either) and patched (the previous version's there).
Medians of `--repeats`; the patched files are checked against a full derive once.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from hygraph.store import derived, view_loader
from hygraph.store.artifacts import CHUNKS, DOCUMENTS, GRAPH, LEXICAL_CHUNKS, NODE_CHUNK
from hygraph.store.objects import open_objects
from hygraph.store.versions import IndexStore, Version


def copy_index(src: Path, dst: Path) -> None:
    """Manifests copied, segments hard-linked (immutable: a writer only adds files), nothing else."""
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for name in ("index.json", "CURRENT"):
        shutil.copy2(src / name, dst / name)
    shutil.copytree(src / "versions", dst / "versions")
    subprocess.run(["cp", "-al", str(src / "segments"), str(dst / "segments")], check=True)


def upload_index(src: Path, uri: str, cache_dir: str, tmp: Path) -> None:
    """The index's identity, segments and manifests put under `uri`, `CURRENT` last. Each file goes through the
    node's cache (a put keeps the writer's copy there), so the base version's segments are local already."""
    objects = open_objects(uri, cache_dir)
    files = [p for p in sorted(src.rglob("*")) if p.is_file() and p.relative_to(src).parts[0] in ("segments",
                                                                                                  "versions")]
    for path in [src / "index.json", *files, src / "CURRENT"]:
        shutil.copyfile(path, tmp)
        objects.put_file(path.relative_to(src).as_posix(), tmp)


def _keep_all(w, version: Version, changed: set[str]) -> None:
    for name, ref in version.manifest.tables.items():
        if name not in changed:
            w.tables[name] = type(ref)(list(ref.segments), ref.rows)


def insert_copy(store: IndexStore, doc_id: str) -> int:
    """Publish a version holding a copy of `doc_id` under a new id: its document, chunks, postings and graph rows,
    the copied chunks linked to the original chunks' neighbours (whose rows are rewritten with them)."""
    v = store.open()
    dims = v.manifest.dims
    doc = v.table(DOCUMENTS).get(doc_id)
    new_doc = f"{doc_id}#copy"
    rename = {c: f"{new_doc}:{i}" for i, c in enumerate(doc.chunks)}
    graph = v.table(GRAPH)
    graph_rows: dict[str, object] = {}
    for c, nc in rename.items():
        row = graph.get(c)
        nbrs = tuple(rename.get(n, n) for n in row.neighbours)
        graph_rows[nc] = replace(row, id=nc, neighbours=nbrs)
        for n in row.neighbours:
            if n in rename:
                continue
            cur = graph_rows.get(n) or graph.get(n)
            graph_rows[n] = replace(cur, neighbours=(*cur.neighbours, nc))
    assert all(r.kind == NODE_CHUNK for k, r in graph_rows.items() if k in rename.values())
    with store.begin() as w:
        _keep_all(w, v, {"documents", "chunks", "lexical_chunks", "graph"})
        w.change(v.table(DOCUMENTS), DOCUMENTS, [replace(doc, id=new_doc, chunks=tuple(rename.values()))], [], dims)
        w.change(v.table(CHUNKS), CHUNKS, [replace(v.table(CHUNKS).get(c), id=nc, doc_id=new_doc)
                                          for c, nc in rename.items()], [], dims)
        w.change(v.table(LEXICAL_CHUNKS), LEXICAL_CHUNKS, [replace(v.table(LEXICAL_CHUNKS).get(c), id=nc)
                                                          for c, nc in rename.items()], [], dims)
        w.change(graph, GRAPH, list(graph_rows.values()), [], dims)
        w.commit(v.manifest)
        return w.version


def delete_doc(store: IndexStore, doc_id: str) -> int:
    """Publish a version without `doc_id`: its rows tombstoned, its chunks unlinked from their neighbours."""
    v = store.open()
    dims = v.manifest.dims
    doc = v.table(DOCUMENTS).get(doc_id)
    graph = v.table(GRAPH)
    gone = set(doc.chunks)
    rows: dict[str, object] = {}
    for c in doc.chunks:
        for n in graph.get(c).neighbours:
            if n not in gone:
                cur = rows.get(n) or graph.get(n)
                rows[n] = replace(cur, neighbours=tuple(x for x in cur.neighbours if x != c))
    with store.begin() as w:
        _keep_all(w, v, {"documents", "chunks", "lexical_chunks", "graph"})
        w.change(v.table(DOCUMENTS), DOCUMENTS, [], [doc_id], dims)
        w.change(v.table(CHUNKS), CHUNKS, [], list(doc.chunks), dims)
        w.change(v.table(LEXICAL_CHUNKS), LEXICAL_CHUNKS, [], list(doc.chunks), dims)
        w.change(graph, GRAPH, list(rows.values()), list(gone), dims)
        w.commit(v.manifest)
        return w.version


def _dir(store: IndexStore, version: int) -> Path:
    return store.derived_dir / derived.directory_name(store.uid, version)


def _timed_load(store: IndexStore, version: int, base: Path | None, backup: Path | None) -> float:
    """`structures()` of `version` with no files of it on the node (on S3 not its segments either) and, with
    `base`, the base's restored."""
    shutil.rmtree(store.derived_dir, ignore_errors=True)
    store.derived_dir.mkdir(parents=True)
    cache = getattr(store.objects, "cache", None)
    if cache is not None:  # on S3: the version's own segments are fetched, as by a reader on another node
        for copy in (cache.directory / "segments").glob(f"*/{version:06d}-*"):
            copy.unlink()
    if base is not None and backup is not None:
        shutil.copytree(backup, base)
    v = store.open(version)
    t = time.perf_counter()
    view_loader.structures(v)
    return time.perf_counter() - t


def _same_files(a: Path, b: Path) -> None:
    """What two directories read as: equal structures (terms may be in another order)."""
    import tests.unit.test_delta_structures as check  # the test's comparison, run on the real index
    check._same(None, derived.Derived(a), derived.Derived(b))  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index-dir", required=True)
    ap.add_argument("--work", default="/tmp/bench_derive")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--out", default="")
    ap.add_argument("--s3", action="store_true", help="the index on a SeaweedFS server started here (loopback)")
    args = ap.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with ExitStack() as stack:
        if args.s3:
            from tests.s3server import seaweedfs

            (work / "weed").mkdir()
            server = stack.enter_context(seaweedfs(work / "weed"))
            os.environ.update(server.env())
            idx = f"s3://{server.bucket}/derive/index"
            upload_index(Path(args.index_dir), idx, str(work / "cache"), work / "upload.tmp")
        else:
            idx = str(work / "index")
            copy_index(Path(args.index_dir), Path(idx))
        run(args, IndexStore(idx, cache_dir=str(work / "cache")), work)
    shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, store: IndexStore, work: Path) -> None:
    v0 = store.current_version()
    docs = store.open().table(DOCUMENTS)
    ids = [d for _, d in zip(range(200), docs.ids())]
    v_ins = insert_copy(store, ids[100])
    v_del = delete_doc(store, ids[150])
    manifest = store.manifest(v0)
    nodes = sum(manifest.counts.get(k, 0) for k in ("chunks", "entities", "hyperedges"))
    print(f"index {args.index_dir}: version {v0}, {manifest.counts.get('documents')} documents, "
          f"{manifest.counts.get('chunks')} chunks, ~{nodes} graph nodes; insert -> version {v_ins}, "
          f"delete -> version {v_del}; {store.uri}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}",
          flush=True)

    # The base files of each version, made once (full) and kept aside.
    backups = work / "backups"
    shutil.rmtree(backups, ignore_errors=True)
    backups.mkdir()
    for v in (v0, v_ins):
        shutil.rmtree(store.derived_dir, ignore_errors=True)
        view_loader.structures(store.open(v))
        shutil.copytree(_dir(store, v), backups / str(v))
    results = {}
    for label, version, base in (("insert", v_ins, v0), ("delete", v_del, v_ins)):
        full, patched, derive = [], [], []
        for _ in range(args.repeats):
            full.append(_timed_load(store, version, None, None))
            patched.append(_timed_load(store, version, _dir(store, base), backups / str(base)))
            t = time.perf_counter()
            view_loader._derive(store.open(version))
            derive.append(time.perf_counter() - t)
        f, p, d = (statistics.median(x) for x in (full, patched, derive))
        results[label] = {"version": version, "full_s": f, "derive_only_s": d, "patched_s": p, "ratio": p / f,
                          "ratio_to_derive": p / d, "full_all": full, "patched_all": patched}
        print(f"{label}: full load {f:.3f} s (of which _derive {d:.3f} s), patched load {p:.3f} s, "
              f"patched/full {p / f:.3f}, patched/_derive {p / d:.3f}  (runs: full {[round(x, 3) for x in full]}, "
              f"patched {[round(x, 3) for x in patched]})", flush=True)
        if not args.no_check:
            got = work / "patched"
            shutil.rmtree(got, ignore_errors=True)
            shutil.copytree(_dir(store, version), got)
            _timed_load(store, version, None, None)
            _same_files(got, _dir(store, version))
            print(f"{label}: the patched files equal a full derive's", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"index": args.index_dir, "store": store.uri, **results}, indent=1))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
