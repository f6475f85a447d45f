# parser fuzzing
