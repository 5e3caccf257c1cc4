# GPU 0's total energy counter (mJ since the driver loaded) read through nvidia-ml-py, independent
# of the agent; "n/a <why>" when it cannot be read.
try:
    import pynvml
    pynvml.nvmlInit()
    print(pynvml.nvmlDeviceGetTotalEnergyConsumption(pynvml.nvmlDeviceGetHandleByIndex(0)))
except Exception as e:  # any failure is a reading we do not have, not a failed check
    print("n/a", type(e).__name__, e)
