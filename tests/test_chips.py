import pytest

from tpu_lab.errors import InvalidArgument
from tpu_lab.host.chips import generation_by_name, scan_tpu_chips
from tpu_lab.testing import write_fake_tpu_host


@pytest.mark.parametrize(
    ("generation", "chips", "name", "hbm", "ranks"),
    [
        ("v5e", 8, "TPU v5e", 16, (1, 4, 8)),
        ("v6e", 4, "TPU v6e", 32, (1, 4)),
        ("v6e", 1, "TPU v6e", 32, (1,)),
        ("v7", 8, "TPU v7", 192, (2, 4, 8)),
        ("v4", 4, "TPU v4", 32, (1, 2, 4)),
        ("v5p", 2, "TPU v5p", 95, (1, 2)),
    ],
)
def test_scan_finds_chips_on_fake_hosts(tmp_path, generation, chips, name, hbm, ranks):
    sysfs, dev = write_fake_tpu_host(tmp_path, generation, chips)
    found = scan_tpu_chips(sysfs, dev)
    assert found.count == chips
    assert found.generation == name
    assert found.hbm_gib_per_chip == hbm
    assert found.rank_counts == ranks
    assert len(found.pci_addresses) == chips
    assert found.without_vfio == 0


def test_chips_without_vfio_are_not_usable(tmp_path):
    sysfs, dev = write_fake_tpu_host(tmp_path, "v6e", 4, vfio=False)
    found = scan_tpu_chips(sysfs, dev)
    assert (found.count, found.without_vfio, found.generation) == (0, 4, None)


def test_unknown_device_id_is_a_generic_tpu(tmp_path):
    sysfs, dev = write_fake_tpu_host(tmp_path, "v6e", 2)
    for d in (sysfs / "bus/pci/devices").iterdir():
        if (d / "vendor").read_text().strip() == "0x1ae0":
            (d / "device").write_text("0x0099\n")
    found = scan_tpu_chips(sysfs, dev)
    assert (found.count, found.generation, found.hbm_gib_per_chip, found.rank_counts) == (2, "TPU", None, ())


def test_missing_sysfs_means_no_chips(tmp_path):
    found = scan_tpu_chips(tmp_path / "nothing", tmp_path / "nodev")
    assert found.count == 0 and found.generation is None


def test_this_machine_has_no_tpu():
    assert scan_tpu_chips().count == 0


def test_unknown_generation_name():
    with pytest.raises(InvalidArgument, match="Use one of: v4, v5p, v5e, v6e, v7"):
        generation_by_name("v9")
