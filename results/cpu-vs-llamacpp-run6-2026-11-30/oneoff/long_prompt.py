# One-off (session 5): the 480-word prompt of the prefill timings (505 tokens; three copies = 1513).
# python3 long_prompt.py > long.txt
import random
words = "the quick brown fox jumps over a lazy dog while engineers measure prefill speed of small language models on two cores".split()
random.seed(1)
print(" ".join(random.choice(words) for _ in range(480)))
