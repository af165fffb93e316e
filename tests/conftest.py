import matplotlib
import pytest

matplotlib.use("agg")


@pytest.fixture(autouse=True)
def _seed_torch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    torch.set_num_threads(2)
