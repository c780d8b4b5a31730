"""nozero lint: flags code that zeroes, skips or swallows non-finite training signal."""
