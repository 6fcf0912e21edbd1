from preflight.checks.dataloader.required import Required


def test_required_rate_is_per_gpu_times_gpus_times_headroom():
    required = Required(300.0, 8, 20.0)
    assert required.rate == 2880.0
    assert required.arithmetic() == "300 samples/s/GPU x 8 GPUs x 1.2 headroom = 2880 samples/s"
    assert Required(250.0, 1, 0.0).arithmetic() == "250 samples/s/GPU x 1 GPU = 250 samples/s"
