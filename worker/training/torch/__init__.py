"""PyTorch back-end; imported only in the training process of a pytorch job."""
