"""The machine a measurement names: CPU, cores, threads, GPU, versions, and the load taken before the work."""

from __future__ import annotations

from evolm.runs.machine import load_average, machine


def test_the_machine_names_its_cpu_threads_gpu_versions_and_the_load_given() -> None:
    info = machine(load_at_start=1.25)
    assert {"cpu", "cores", "torch_threads", "gpu", "torch", "transformers"} <= set(info)
    assert info["load_avg_1m_at_start"] == 1.25
    assert "load_avg_1m_at_start" not in machine()
    load = load_average()
    assert load is None or load >= 0
