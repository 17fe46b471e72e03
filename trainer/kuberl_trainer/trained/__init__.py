"""Using a trained policy: `inference.load` a run directory, a checkpoint or an exported file, and
act with it or evaluate it (`loaded`); export it to ONNX or TorchScript (`export`) and load that
file back (`exported`); record its episodes (`video`)."""
