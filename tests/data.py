"""Where the shared development data sets are: beside the checkout, as in CI, or the workplace's shared/."""

from pathlib import Path

_BESIDE = Path(__file__).resolve().parents[2] / "shared" / "data" / "dev"
DEV_DATA = _BESIDE if _BESIDE.is_dir() else Path("/work/shared/data/dev")
