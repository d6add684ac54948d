"""In-process FAISS store, persisted per collection under a directory (faiss-gpu when configured)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from hygraph.backends.vectorstore.base import Hit, Metric
from hygraph.config import VectorStoreConfig
from hygraph.errors import StoreError


class FaissStore:
    """Rows (ids, vectors, layers) in memory, saved on seal with the ANN index `cfg.index_type` names.

    HNSW (faiss IndexHNSWFlat) is built at seal and saved beside the rows, so a process that
    opens the collection searches at once; FLAT (and any collection changed since it was
    loaded) uses an exact index built on first search. On a GPU the exact index moves there.
    """

    def __init__(self, cfg: VectorStoreConfig, root: str | os.PathLike[str], device: str) -> None:
        self.cfg = cfg
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.device = device
        self._cols: dict[str, dict] = {}

    def _path(self, name: str) -> Path:
        return self.root / name

    def _load(self, name: str) -> dict:
        if name not in self._cols:
            meta = self._path(name) / "meta.json"
            if not meta.is_file():
                raise StoreError(f"faiss collection {name} not found under {self.root}")
            info = json.loads(meta.read_text())
            data = np.load(self._path(name) / "rows.npz", allow_pickle=False)
            index_file = self._path(name) / "index.faiss"
            index = None
            if self._hnsw() and index_file.is_file():
                import faiss

                index = faiss.read_index(str(index_file))
            self._cols[name] = {"metric": info["metric"], "dim": info["dim"],
                                "ids": list(data["ids"]), "vecs": data["vecs"], "layers": data["layers"],
                                "index": index, "stamp": self._stamp(name)}
        return self._cols[name]

    def _stamp(self, name: str) -> int:
        meta = self._path(name) / "meta.json"
        return meta.stat().st_mtime_ns if meta.is_file() else 0

    def _hnsw(self) -> bool:
        return self.cfg.index_type == "HNSW" and self.device != "cuda"

    def ping(self) -> None:
        if not self.root.is_dir():
            raise StoreError(f"faiss store directory {self.root} is missing")

    def exists(self, name: str) -> bool:
        return name in self._cols or (self._path(name) / "meta.json").is_file()

    def create(self, name: str, dim: int, metric: Metric) -> None:
        self._cols[name] = {"metric": metric, "dim": dim, "ids": [], "layers": np.zeros(0, np.int64),
                            "vecs": np.zeros((0, dim), np.float32), "index": None, "stamp": 0}

    def upsert(self, name: str, ids: Sequence[str], vectors: np.ndarray, version: int,
               layers: Sequence[int] | None = None) -> None:
        col = self._load(name)
        self.delete(name, ids)
        vecs = np.asarray(vectors, np.float32)
        col["ids"].extend(ids)
        col["vecs"] = np.vstack([col["vecs"], vecs])
        lay = np.asarray(layers if layers is not None else np.zeros(len(ids)), np.int64)
        col["layers"] = np.concatenate([col["layers"], lay])
        col["row"] = None
        # An HNSW graph takes new rows in place (an update's few rows cost milliseconds, a rebuild
        # of a large collection seconds); removing rows needs a rebuild.
        if col["index"] is not None and self._hnsw() and len(ids):
            col["index"].add(vecs)
        else:
            col["index"] = None

    def fill(self, name: str, ids: Sequence[str], vectors: np.ndarray, version: int,
             layers: Sequence[int] | None = None) -> None:
        self.upsert(name, ids, vectors, version, layers)

    def delete(self, name: str, ids: Sequence[str]) -> None:
        col = self._load(name)
        gone = set(ids)
        keep = np.array([i not in gone for i in col["ids"]], dtype=bool)
        if not keep.all():
            col["ids"] = [i for i, k in zip(col["ids"], keep) if k]
            col["vecs"], col["layers"], col["index"] = col["vecs"][keep], col["layers"][keep], None
            col["row"] = None

    def open(self, name: str) -> None:
        """Load `name`, again when another process has persisted a newer copy since."""
        if name in self._cols and self._cols[name]["stamp"] != self._stamp(name):
            del self._cols[name]
        self._load(name)

    def release(self, name: str) -> None:
        self._cols.pop(name, None)

    def persist(self, *names: str) -> None:
        for name in names:
            self.seal(name)

    def seal(self, name: str) -> None:
        col = self._load(name)
        path = self._path(name)
        path.mkdir(parents=True, exist_ok=True)
        tmp = path / "rows.tmp.npz"
        np.savez(tmp, ids=np.array(col["ids"], dtype=str), vecs=col["vecs"], layers=col["layers"])
        os.replace(tmp, path / "rows.npz")
        if self._hnsw():
            import faiss

            faiss.write_index(self._index(col), str(path / "index.tmp.faiss"))
            os.replace(path / "index.tmp.faiss", path / "index.faiss")
        (path / "meta.json").write_text(json.dumps({"metric": col["metric"], "dim": col["dim"]}))
        col["stamp"] = self._stamp(name)

    def reopen(self, name: str, dim: int, metric: Metric) -> set[str] | None:
        return None  # rows reach the disk only at `seal`: no collection is ever left partly written

    def _index(self, col: dict):  # noqa: ANN202 - faiss types are untyped
        if col["index"] is None:
            import faiss

            metric = faiss.METRIC_INNER_PRODUCT if col["metric"] == "IP" else faiss.METRIC_L2
            if self._hnsw():
                index = faiss.IndexHNSWFlat(col["dim"], self.cfg.hnsw_m, metric)
                index.hnsw.efConstruction = self.cfg.hnsw_ef_construction
            else:
                index = faiss.IndexFlat(col["dim"], metric)
            if self.device == "cuda":
                index = faiss.index_cpu_to_all_gpus(index)
            index.add(col["vecs"])
            col["index"] = index
        return col["index"]

    def search(self, name: str, queries: np.ndarray, k: int, layer: int | None = None) -> list[list[Hit]]:
        col = self._load(name)
        if not col["ids"]:
            return [[] for _ in range(len(queries))]
        q = np.asarray(queries, np.float32)
        if layer is not None:
            # Layer-filtered searches only touch the summaries of one layer: exact scores over those rows.
            rows = np.flatnonzero(col["layers"] == layer)
            sub = col["vecs"][rows]
            if col["metric"] == "IP":
                scores, best = sub @ q.T, -(sub @ q.T)
            else:
                scores = (sub ** 2).sum(1)[:, None] - 2 * sub @ q.T + (q ** 2).sum(1)[None, :]
                best = scores
            top = np.argsort(best, axis=0, kind="stable")[:k]
            return [[Hit(col["ids"][rows[t]], float(scores[t, j]), layer) for t in top[:, j]]
                    for j in range(len(q))]
        index = self._index(col)
        if self._hnsw():
            index.hnsw.efSearch = max(self.cfg.hnsw_ef_search, k)
        dist, idx = index.search(q, min(k, len(col["ids"])))
        return [[Hit(col["ids"][i], float(d), int(col["layers"][i])) for d, i in zip(drow, irow) if i >= 0]
                for drow, irow in zip(dist, idx)]

    def fetch(self, name: str, ids: Sequence[str], fresh: bool = False) -> np.ndarray:
        col = self._load(name)
        if col.get("row") is None:
            col["row"] = {cid: i for i, cid in enumerate(col["ids"])}
        missing = [i for i in ids if i not in col["row"]]
        if missing:
            raise StoreError(f"{name}: no vector for id {missing[0]!r}")
        return col["vecs"][[col["row"][i] for i in ids]]

    def drop(self, name: str) -> None:
        self._cols.pop(name, None)
        path = self._path(name)
        if path.is_dir():
            for f in path.iterdir():
                f.unlink()
            path.rmdir()

    def close(self) -> None:
        self._cols.clear()
