"""Training: the autograd transform, between the optimised trace and fusion.

- `prim_rules.py`: the vector-Jacobian product of each prim.
- `torch_rules.py`: backward rules of library calls (linear, matmul, embedding,
  convolution) and softmax, and the generic rule for any other op that runs whole.
- `attention_rules.py`: F.scaled_dot_product_attention's rules: where eager runs the fused CPU
  kernel, a training forward runs it (output and logsumexp saved) and the backward is its fused
  backward, one call; elsewhere the math rule (scores recomputed); dropout's explicit forward.
- `composite_rules.py`: rules that emit torch-level backward symbols (gelu, silu, relu,
  tanh, sigmoid, layer_norm, training-mode batch_norm): torch's backward kernel when run
  whole, prims when fused; layer_norm's and training-mode batch_norm's forwards keep their
  statistics for their backwards.
- `transform.py`: the joint forward-backward trace and its split into a forward trace that
  returns what the backward saves and a backward trace (`differentiate`).
- `simplify.py`: peepholes on the backward ops (the pads of a split's gradient as one cat).
- `remat.py`: save or recompute: cheap values recomputed in the backward, reductions' outputs saved.
- `runtime.py`: the two compiled programs joined to PyTorch autograd (a torch.autograd.Function).
"""
