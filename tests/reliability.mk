# reliability tests
