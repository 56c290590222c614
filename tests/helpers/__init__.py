"""Helpers shared by the tests (one copy each): bundled audio, SNR, subprocess CLI runs, file trees and a full
disk, small ONNX graphs and torch exports, stream loops. Torch is imported only by the functions that need it."""
