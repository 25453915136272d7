"""ooc-svm: out-of-core SVM training."""
