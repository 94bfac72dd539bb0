"""A small shipped math set for the reasoning family's evaluation (`--prompts builtin:math`).

Written for this project (not taken from a benchmark): short problems with one exact answer, in
the form RLinf's math reward compares (a final answer in \\boxed{...}). Small on purpose: it runs
every few hours against the served step and tracks the trend over steps, it is no benchmark.
"""

PROBLEMS = (
    ("What is 17 + 25?", "42"),
    ("What is 12 * 13?", "156"),
    ("What is 2^10?", "1024"),
    ("What is the remainder when 100 is divided by 7?", "2"),
    ("Solve for x: 3x + 5 = 20.", "5"),
    ("Solve for x: 2x - 7 = 11.", "9"),
    ("What is the greatest common divisor of 48 and 36?", "12"),
    ("What is the least common multiple of 4 and 6?", "12"),
    ("How many positive divisors does 36 have?", "9"),
    ("What is the sum of the integers from 1 to 20?", "210"),
    ("What is 15% of 80?", "12"),
    ("A rectangle has length 8 and width 5. What is its area?", "40"),
    ("What is the square root of 169?", "13"),
    ("What is 7! / 5!?", "42"),
    ("How many ways can 3 books be arranged on a shelf?", "6"),
    ("What is the value of 3^4 - 2^5?", "49"),
    ("If f(x) = 2x^2 - 3, what is f(3)?", "15"),
    ("What is the smallest prime number greater than 30?", "31"),
    ("The angles of a triangle are 50 and 60 degrees. What is the third angle in degrees?", "70"),
    ("What is 1/2 + 1/3? Give the answer as a fraction.", "\\frac{5}{6}"),
)

# The instruction DeepSeek-R1's distilled models are evaluated with (deepseek-ai/DeepSeek-R1 model
# card, "Usage Recommendations": "Please reason step by step, and put your final answer within
# \\boxed{}.").
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def items():
    return [{"prompt": f"{q} {INSTRUCTION}", "expected": a} for q, a in PROBLEMS]
