"""TensorFlow back-end; imported only in the training process of a tensorflow job."""
