"""The labelled golden set for the `math` verifier (also read by bench/bench_math_verify.py).

Each case: where the reference comes from, the reference, a model-style response, the expected verdict
(True: correct, False: wrong, "error": the verifier must report a failure, never a verdict), the category
and the reason for the label. References marked `math500:<unique_id>`, `gsm8k:<idx>`, `aime24:<id>`,
`aime25:<id>` or `amc23:<id>` are copied from the real data sets in ../shared/data (a test checks that
they match it); `synthetic` ones cover notation the data sets lack.
"""
from __future__ import annotations

from typing import NamedTuple, Union


class Case(NamedTuple):
    source: str
    reference: Union[str, int, float]
    response: str
    expected: Union[bool, str]
    category: str
    reason: str


def box(answer: str) -> str:
    """A typical end of a model response."""
    return "Putting it together, the final answer is $\\boxed{" + answer + "}$."


M = "math500:test/"
CASES: list[Case] = []


def add(source: str, reference, category: str, rows: list[tuple[str, Union[bool, str], str]]) -> None:
    """Cases sharing one reference: (response, expected, reason) rows; a response without a backslash
    box or a sentence is boxed with `box`."""
    for response, expected, reason in rows:
        if "\\boxed" not in response and "\\fbox" not in response and not response.startswith("@"):
            response = box(response)
        CASES.append(Case(source, reference, response.lstrip("@"), expected, category, reason))


# --- integers -------------------------------------------------------------------------------------
add(M + "number_theory/572.json", "9", "integer", [
    ("9", True, "identical integer"),
    ("9.0", True, "a decimal point with zero fraction is still 9"),
    ("09", True, "leading zero"),
    ("+9", True, "explicit plus sign"),
    ("-9", False, "wrong sign"),
    ("8", False, "off by one"),
    ("90", False, "different number"),
    ("9.01", False, "not the integer 9"),
])
add(M + "intermediate_algebra/134.json", "-50", "integer", [
    ("-50", True, "identical"),
    ("- 50", True, "space after the minus sign"),
    ("50", False, "sign dropped"),
    ("-50.000", True, "trailing zeros after the point"),
    ("-\\frac{100}{2}", True, "an unreduced fraction equal to -50"),
])
add(M + "intermediate_algebra/607.json", "13535", "integer", [
    ("13535", True, "identical"),
    ("13,535", True, "thousands separator"),
    ("13{,}535", True, "LaTeX-braced thousands separator"),
    ("13\\,535", True, "thin-space thousands separator"),
    ("13536", False, "off by one in the last digit"),
    ("1.3535 \\times 10^{4}", True, "scientific notation of the same integer"),
])
add(M + "algebra/722.json", "9901", "integer", [
    ("9901", True, "identical"),
    ("9,901", True, "thousands separator"),
    ("9910", False, "digits swapped"),
])
add("aime24:67", "025", "aime", [
    ("25", True, "AIME answers are written with leading zeros; 025 is 25"),
    ("025", True, "identical"),
    ("250", False, "a different number"),
    ("@The answer is 25.", True, "answer sentence without a box"),
])
add("aime24:60", "204", "aime", [
    ("204", True, "identical"),
    ("@Thus $m+n = 204$.\n\n**Final Answer**\n\\[ \\boxed{204} \\]", True, "boxed after a final-answer heading"),
    ("@Thus m+n = 204. Double-checking, the answer is 240.", False, "the last stated answer is what counts"),
    ("240", False, "digits permuted"),
])
add("aime25:0", 70, "aime", [
    ("70", True, "integer reference stored as int"),
    ("70.0", True, "decimal form of the same integer"),
    ("7", False, "a different number"),
])
add("aime25:1", 588, "aime", [
    ("588", True, "identical"),
    ("@After simplifying we get 588", True, "trailing bare number on the last line"),
    ("589", False, "off by one"),
])
add("amc23:0", 27.0, "amc", [
    ("27", True, "float reference 27.0 is the integer 27"),
    ("27.0", True, "same float"),
    ("26", False, "off by one"),
])
add("amc23:17", -1.0, "amc", [
    ("-1", True, "float reference -1.0"),
    ("1", False, "sign dropped"),
    ("-1.00", True, "trailing zeros"),
])
add("amc23:44", 1625.0, "amc", [
    ("1625", True, "identical value"),
    ("1,625", True, "thousands separator"),
    ("1626", False, "off by one"),
])

# --- GSM8K (references are the text after ####) -----------------------------------------------------
add("gsm8k:0", "18", "gsm8k", [
    ("@Janet sells 16 - 3 - 4 = 9 duck eggs a day.\nShe makes 9 * 2 = $18 every day at the farmer's market.\n#### 18", True, "GSM8K #### answer line"),
    ("@She makes 9 * 2 = 18 dollars.\n#### 20", False, "the #### line is the answer, not an earlier number"),
    ("\\$18", True, "currency sign"),
    ("18 \\text{ dollars}", True, "unit in text"),
    ("@The answer is $18.", True, "answer sentence with a dollar sign"),
    ("@The answer is 18 dollars.", True, "answer sentence with a unit word"),
    ("\\$18.00", True, "cents written out"),
    ("\\$17.99", False, "not 18"),
    ("18 \\text{ thousand}", False, "a scale word is not a unit: 18 thousand is not 18"),
])
add("gsm8k:146", "2,125", "gsm8k", [
    ("2125", True, "reference has a thousands separator"),
    ("2,125", True, "identical"),
    ("\\$2,125", True, "currency sign and separator"),
    ("2.125", False, "a decimal point is not a thousands separator"),
    ("2,215", False, "different digits"),
])
add("gsm8k:611", "1,450,000", "gsm8k", [
    ("1450000", True, "separator removed"),
    ("1,450,000", True, "identical"),
    ("1.45 \\times 10^6", True, "scientific notation"),
    ("1 450 000", True, "space-separated thousands"),
    ("1.45 \\text{ million}", True, "a scale word multiplies"),
    ("145000", False, "missing a zero"),
])
add("gsm8k:2", "70000", "gsm8k", [
    ("70,000", True, "thousands separator"),
    ("70000.0", True, "decimal zero"),
    ("7000", False, "missing a zero"),
    ("@**Answer: 70000**", True, "markdown bold answer"),
])
add("gsm8k:1", "3", "gsm8k", [
    ("@So it takes 2 + 1 = 3", True, "trailing number"),
    ("@It takes 2/2=1 bolt of white fiber, so 2+1=3 bolts.\n#### 3", True, "#### line"),
    ("3 \\text{ bolts}", True, "unit word in text"),
    ("4", False, "wrong count"),
])

# --- fractions and exact rationals ----------------------------------------------------------------
add(M + "algebra/2584.json", "\\frac{14}{3}", "fraction", [
    ("\\frac{14}{3}", True, "identical"),
    ("\\dfrac{14}{3}", True, "dfrac is frac"),
    ("\\tfrac{14}{3}", True, "tfrac is frac"),
    ("14/3", True, "slash fraction"),
    ("\\frac{28}{6}", True, "unreduced equal fraction"),
    ("4\\frac{2}{3}", True, "mixed number 4 2/3"),
    ("4.6667", True, "decimal approximation, correctly rounded, within rel_tol"),
    ("4.67", False, "two-decimal rounding is off by more than rel_tol"),
    ("4.6", False, "neither rounding nor close"),
    ("\\frac{3}{14}", False, "reciprocal"),
    ("14 \\div 3", True, "division sign"),
])
add(M + "intermediate_algebra/1197.json", "\\frac{3}{56}", "fraction", [
    ("\\frac{3}{56}", True, "identical"),
    ("3/56", True, "plain slash"),
    ("\\frac{6}{112}", True, "unreduced"),
    ("\\frac{3}{65}", False, "digits swapped in denominator"),
])
add(M + "intermediate_algebra/515.json", "\\frac43", "fraction", [
    ("\\frac{4}{3}", True, "\\frac43 reads one digit per argument"),
    ("\\frac43", True, "identical"),
    ("43", False, "not forty-three"),
    ("1\\frac{1}{3}", True, "mixed number"),
    ("1.\\overline{3}", True, "repeating decimal is exact"),
])
add(M + "prealgebra/153.json", "\\frac 59", "fraction", [
    ("\\frac{5}{9}", True, "space-separated single-digit arguments"),
    ("0.\\overline{5}", True, "repeating decimal 0.555... is 5/9"),
    ("0.5556", True, "rounded decimal within tolerance"),
    ("0.56", False, "too coarse"),
    ("\\frac{9}{5}", False, "reciprocal"),
])
add(M + "algebra/2257.json", "\\frac9{19}", "fraction", [
    ("\\frac{9}{19}", True, "mixed brace style"),
    ("9/19", True, "slash"),
    ("\\frac{19}{9}", False, "reciprocal"),
])
add(M + "prealgebra/1655.json", "\\dfrac{17}{50}", "fraction", [
    ("0.34", True, "exact decimal of 17/50"),
    ("\\frac{34}{100}", True, "unreduced"),
    ("0.35", False, "different decimal"),
    ("34\\%", True, "percent of the same value"),
])
add(M + "geometry/826.json", "1\\frac{4}{5}", "fraction", [
    ("\\frac{9}{5}", True, "mixed number 1 4/5 is 9/5"),
    ("1.8", True, "exact decimal"),
    ("\\frac{4}{5}", False, "lost the whole part"),
    ("1 \\frac{4}{5}", True, "mixed number with a space"),
])
add(M + "algebra/2470.json", "137 \\frac{1}{2}", "fraction", [
    ("137.5", True, "mixed number as a decimal"),
    ("\\frac{275}{2}", True, "improper fraction"),
    ("68.5", False, "137 times 1/2 is not the mixed number"),
])
add(M + "counting_and_probability/377.json", "\\frac{448}{15625}", "fraction", [
    ("\\frac{448}{15625}", True, "identical"),
    ("0.028672", True, "exact decimal of 448/15625"),
    ("0.0287", False, "rounded to 4 decimals: off by more than rel_tol"),
])
add(M + "number_theory/598.json", ".0000672", "decimal", [
    ("0.0000672", True, "leading zero"),
    ("6.72 \\times 10^{-5}", True, "scientific notation"),
    ("6.72e-5", True, "e-notation"),
    ("\\frac{21}{312500}", True, "exact fraction of the decimal"),
    ("0.000672", False, "off by a factor 10"),
])
add(M + "number_theory/410.json", ".35625", "decimal", [
    ("0.35625", True, "leading zero"),
    ("\\frac{57}{160}", True, "exact fraction"),
    ("0.356", False, "truncated to 3 decimals: off by more than rel_tol"),
])
add(M + "algebra/621.json", "3.21", "decimal", [
    ("3.21", True, "identical"),
    ("3.210", True, "trailing zero"),
    ("\\frac{321}{100}", True, "fraction"),
    ("3.2", False, "rounded reference needs all its digits"),
    ("3.12", False, "digits swapped"),
])
add(M + "prealgebra/1784.json", "326.5", "decimal", [
    ("326.5", True, "identical"),
    ("\\frac{653}{2}", True, "fraction"),
    ("326", False, "rounded down"),
    ("327", False, "rounded up"),
])
add("synthetic", "\\frac{1}{2004!}", "exact", [
    ("\\frac{1}{2004!}", True, "identical"),
    ("\\frac{1}{2006!}", False, "both tiny, but exact rationals differ: no float rounding"),
    ("\\frac{2005 \\cdot 2006}{2006!}", True, "exactly equal rational"),
    ("0", False, "a tiny positive number is not zero"),
])
add("synthetic", "2^{100}", "exact", [
    ("1267650600228229401496703205376", True, "the exact integer"),
    ("1267650600228229401496703205377", False, "off by one at 31 digits: exact integers"),
    ("1.2676506 \\times 10^{30}", False, "an approximation of an exact integer"),
    ("4^{50}", True, "equal power"),
])

# --- radicals and constants -----------------------------------------------------------------------
add(M + "algebra/2036.json", "3\\sqrt{13}", "radical", [
    ("3\\sqrt{13}", True, "identical"),
    ("\\sqrt{117}", True, "sqrt(117) = 3 sqrt(13)"),
    ("3 \\cdot \\sqrt{13}", True, "explicit product"),
    ("3*sqrt(13)", True, "plain-text notation"),
    ("\\sqrt{13} \\cdot 3", True, "commuted"),
    ("3\\sqrt{31}", False, "different radicand"),
    ("10.8167", True, "decimal within tolerance"),
    ("10.82", False, "too coarse"),
    ("13\\sqrt{3}", False, "swapped"),
])
add(M + "prealgebra/1302.json", "11\\sqrt2", "radical", [
    ("11\\sqrt{2}", True, "\\sqrt2 takes one digit"),
    ("\\sqrt{242}", True, "same value"),
    ("11 \\sqrt 2", True, "spaced"),
    ("112", False, "not the digits run together"),
    ("\\frac{22}{\\sqrt{2}}", True, "unrationalised"),
])
add(M + "algebra/1519.json", "\\frac{\\sqrt{3}}{3}", "radical", [
    ("\\frac{1}{\\sqrt{3}}", True, "rationalisation"),
    ("\\frac{\\sqrt{3}}{3}", True, "identical"),
    ("\\sqrt{\\frac{1}{3}}", True, "root of a fraction"),
    ("\\frac{\\sqrt{3}}{2}", False, "different denominator"),
    ("3^{-1/2}", True, "power form"),
    ("\\sqrt{3}/3", True, "slash"),
])
add(M + "geometry/711.json", "1+2\\sqrt{3}", "radical", [
    ("2\\sqrt{3}+1", True, "commuted"),
    ("1+\\sqrt{12}", True, "sqrt(12) = 2 sqrt(3)"),
    ("\\sqrt{13+4\\sqrt{3}}", True, "nested radical that denests"),
    ("3\\sqrt{3}", False, "added unlike terms"),
    ("1-2\\sqrt{3}", False, "sign"),
])
add(M + "intermediate_algebra/1454.json", "70 \\sqrt{2}", "radical", [
    ("70\\sqrt{2}", True, "spacing"),
    ("\\sqrt{9800}", True, "same value"),
    ("98.99", True, "rounded to 2 decimals and within rel_tol (98.99495...)"),
    ("98.9949", True, "decimal within tolerance"),
])
add("synthetic", "\\sqrt[3]{16}", "radical", [
    ("2\\sqrt[3]{2}", True, "cube root simplification"),
    ("16^{1/3}", True, "fractional power"),
    ("\\sqrt{16}", False, "square root is not cube root"),
    ("2.5198", True, "decimal within tolerance"),
])
add(M + "precalculus/1199.json", "\\pi", "constant", [
    ("\\pi", True, "identical"),
    ("pi", True, "plain-text pi"),
    ("3.1416", True, "decimal within tolerance"),
    ("3.14", False, "too coarse for rel_tol 1e-4"),
    ("\\frac{22}{7}", False, "an exact fraction is not pi"),
    ("180^\\circ", True, "half turn in degrees"),
])
add(M + "prealgebra/1423.json", "12\\pi", "constant", [
    ("12\\pi", True, "identical"),
    ("12 \\pi", True, "spacing"),
    ("\\pi \\cdot 12", True, "commuted"),
    ("37.699", True, "decimal within tolerance"),
    ("12", False, "lost pi"),
])
add(M + "geometry/686.json", "18+2\\pi", "constant", [
    ("2\\pi+18", True, "commuted"),
    ("2(9+\\pi)", True, "factored"),
    ("18+\\pi", False, "wrong coefficient"),
    ("24.2832", True, "decimal within tolerance"),
])
add(M + "intermediate_algebra/1111.json", "\\frac{20000}{\\pi}", "constant", [
    ("\\frac{20000}{\\pi}", True, "identical"),
    ("20000/\\pi", True, "slash"),
    ("\\frac{20000}{3.14}", False, "pi replaced by 3.14 is off by more than rel_tol"),
    ("20000\\pi", False, "multiplied instead of divided"),
])
add(M + "precalculus/1105.json", "-\\frac{\\pi}{6}", "constant", [
    ("-\\frac{\\pi}{6}", True, "identical"),
    ("-\\pi/6", True, "slash"),
    ("\\frac{-\\pi}{6}", True, "sign in the numerator"),
    ("\\frac{\\pi}{6}", False, "sign"),
    ("-30^\\circ", True, "the same angle in degrees"),
    ("\\frac{11\\pi}{6}", False, "coterminal angle is a different number"),
])
add("synthetic", "e^{2}", "constant", [
    ("e^2", True, "e is Euler's number"),
    ("\\exp(2)", True, "exp"),
    ("7.3891", True, "decimal within tolerance"),
    ("2e", False, "2e is not e^2"),
])

# --- functions ------------------------------------------------------------------------------------
add("synthetic", "\\log_2 8", "function", [
    ("3", True, "log base 2 of 8 is 3"),
    ("\\frac{\\ln 8}{\\ln 2}", True, "change of base"),
    ("\\log_{2}(8)", True, "braced base and parentheses"),
    ("\\log_8 2", False, "base and argument swapped"),
])
add("synthetic", "\\frac{\\sqrt{3}}{2}", "function", [
    ("\\sin 60^\\circ", True, "sine of 60 degrees"),
    ("\\sin\\frac{\\pi}{3}", True, "exact trig value"),
    ("\\cos\\left(\\frac{\\pi}{6}\\right)", True, "cosine form"),
    ("\\frac{1}{2}", False, "sin(pi/6) instead"),
])
add(M + "precalculus/24313.json", "\\cot x", "function", [
    ("\\cot x", True, "identical"),
    ("\\frac{\\cos x}{\\sin x}", True, "cot = cos/sin"),
    ("\\frac{1}{\\tan x}", True, "reciprocal of tan"),
    ("\\tan x", False, "tan is not cot"),
    ("cot(x)", True, "plain-text function"),
])
add("synthetic", "\\binom{10}{3}", "function", [
    ("120", True, "binomial coefficient value"),
    ("\\dbinom{10}{3}", True, "dbinom"),
    ("\\frac{10!}{3!7!}", True, "factorial formula"),
    ("720", False, "permutations, not combinations"),
])
add("synthetic", "|x-1|", "function", [
    ("|1-x|", True, "absolute value is symmetric"),
    ("\\left| x - 1 \\right|", True, "left/right bars"),
    ("x-1", False, "not the absolute value"),
    ("\\sqrt{(x-1)^2}", True, "equal for every real x"),
])

# --- percent, degrees, units, currency ------------------------------------------------------------
add(M + "precalculus/927.json", "90^\\circ", "degrees", [
    ("90", True, "degree sign dropped"),
    ("90^{\\circ}", True, "braced circ"),
    ("90°", True, "unicode degree sign"),
    ("90 \\text{ degrees}", True, "unit word"),
    ("\\frac{\\pi}{2}", True, "same angle in radians"),
    ("180", False, "different angle"),
    ("45^\\circ", False, "different angle"),
])
add(M + "prealgebra/1003.json", "\\frac{270}7\\text{ degrees}", "degrees", [
    ("\\frac{270}{7}", True, "unit dropped"),
    ("\\frac{270}{7}^\\circ", True, "degree sign"),
    ("38.5714", True, "decimal within tolerance"),
    ("38.57", True, "rounded to 2 decimals and within rel_tol (38.5714...)"),
    ("\\frac{207}{7}", False, "digits swapped"),
])
add(M + "prealgebra/1044.json", "5.4 \\text{ cents}", "units", [
    ("5.4", True, "unit dropped"),
    ("5.4 \\text{ cents}", True, "identical"),
    ("5.40", True, "trailing zero"),
    ("5", False, "rounded"),
    ("0.054", False, "a different number (dollars, not cents) is not recognised"),
])
add(M + "geometry/473.json", "864 \\mbox{ inches}^2", "units", [
    ("864", True, "unit dropped"),
    ("864 \\text{ square inches}", True, "different unit spelling"),
    ("864 \\text{ in}^2", True, "abbreviated unit with power"),
    ("746496", False, "864 squared is not the answer"),
])
add(M + "prealgebra/1114.json", "15\\mbox{ cm}^2", "units", [
    ("15", True, "unit dropped"),
    ("15 \\text{cm}^2", True, "unit without space"),
    ("15 cm^2", True, "bare unit"),
    ("225", False, "the ^2 belongs to the unit, not the number"),
])
add(M + "algebra/2780.json", "\\$18.90", "currency", [
    ("18.90", True, "no currency sign"),
    ("18.9", True, "trailing zero"),
    ("\\$18.9", True, "currency sign"),
    ("18.09", False, "different amount"),
    ("1890", False, "cents without unit"),
])
add(M + "algebra/2626.json", "\\$32,\\!348", "currency", [
    ("32348", True, "separator and sign removed"),
    ("\\$32,348", True, "plain separator"),
    ("32,348 \\text{ dollars}", True, "unit word"),
    ("32.348", False, "decimal point is not a thousands separator"),
])
add(M + "number_theory/417.json", "11,\\! 111,\\! 111,\\! 100", "integer", [
    ("11111111100", True, "all separators removed"),
    ("11,111,111,100", True, "plain separators"),
    ("11111111110", False, "different digits"),
])
add(M + "counting_and_probability/508.json", "10,\\!080", "integer", [
    ("10080", True, "separator removed"),
    ("10,080", True, "plain separator"),
    ("1008", False, "missing digit"),
])
add("synthetic", "25\\%", "percent", [
    ("25", True, "percent sign dropped"),
    ("25\\%", True, "identical"),
    ("0.25", True, "as a fraction"),
    ("\\frac{1}{4}", True, "as a fraction"),
    ("2.5", False, "neither 25 nor 0.25"),
    ("25 \\text{ percent}", True, "percent word"),
])
add("synthetic", "0.6", "percent", [
    ("60\\%", True, "percent answer of a fraction reference"),
    ("60", False, "no percent sign: 60 is not 0.6"),
    ("0.6", True, "identical"),
])

# --- complex numbers ------------------------------------------------------------------------------
add(M + "precalculus/779.json", "-2 + 7i", "complex", [
    ("-2+7i", True, "spacing"),
    ("7i-2", True, "commuted"),
    ("-2+7\\mathrm{i}", True, "upright i"),
    ("-2-7i", False, "conjugate"),
    ("(-2, 7)", False, "a pair is not a complex number"),
    ("-2 + 7 \\cdot i", True, "explicit product"),
])
add(M + "precalculus/990.json", "6 - 5i", "complex", [
    ("6-5i", True, "spacing"),
    ("-5i+6", True, "commuted"),
    ("6+5i", False, "sign of the imaginary part"),
    ("\\frac{12-10i}{2}", True, "unreduced"),
])
add(M + "intermediate_algebra/1063.json", "1+274i", "complex", [
    ("1+274i", True, "identical"),
    ("274i+1", True, "commuted"),
    ("1+247i", False, "digits swapped"),
])
add(M + "algebra/2264.json", "1+2i", "complex", [
    ("1+2i", True, "identical"),
    ("\\frac{5}{1-2i}", True, "unsimplified quotient equals 1+2i"),
    ("1-2i", False, "conjugate"),
])

# --- expressions ----------------------------------------------------------------------------------
add(M + "intermediate_algebra/1994.json", "p - q", "expression", [
    ("p-q", True, "spacing"),
    ("-q+p", True, "commuted"),
    ("q-p", False, "opposite sign"),
    ("-(q-p)", True, "negated difference"),
])
add(M + "intermediate_algebra/431.json", "(a+5)(b+2)", "expression", [
    ("(b+2)(a+5)", True, "commuted factors"),
    ("ab+2a+5b+10", True, "expanded"),
    ("(a+2)(b+5)", False, "different factors"),
    ("(a+5)(b+2)", True, "identical"),
])
add(M + "intermediate_algebra/1217.json", "x^5 - x^4 + x^3 - x^2 + x - 1", "expression", [
    ("x^5-x^4+x^3-x^2+x-1", True, "spacing"),
    ("(x-1)(x^4+x^2+1)", True, "factored form"),
    ("x^5+x^4+x^3+x^2+x+1", False, "signs"),
    ("-1+x-x^2+x^3-x^4+x^5", True, "ascending order"),
])
add(M + "algebra/2046.json", "x^3+3x-6", "expression", [
    ("x^3 + 3x - 6", True, "spacing"),
    ("3x + x^3 - 6", True, "reordered"),
    ("x^3+3x+6", False, "sign of the constant"),
    ("x^{3}+3 x-6", True, "braced exponent"),
])
add(M + "prealgebra/1924.json", "2k+2", "expression", [
    ("2(k+1)", True, "factored"),
    ("2k+2", True, "identical"),
    ("2k", False, "missing constant"),
    ("2+2k", True, "commuted"),
])
add(M + "algebra/2735.json", "\\frac{11+9a}{20}", "expression", [
    ("\\frac{9a+11}{20}", True, "commuted numerator"),
    ("\\frac{11}{20}+\\frac{9a}{20}", True, "split fraction"),
    ("0.55+0.45a", True, "exact decimals of the coefficients"),
    ("\\frac{11+9a}{2}", False, "different denominator"),
])
add(M + "algebra/1547.json", "6r^2-4r-24", "expression", [
    ("2(3r^2-2r-12)", True, "factored out 2"),
    ("6r^2 - 4r - 24", True, "spacing"),
    ("6r^2+4r-24", False, "sign of the middle term"),
])
add(M + "precalculus/1133.json", "3R^2", "expression", [
    ("3R^2", True, "identical"),
    ("3 R^{2}", True, "spacing and braces"),
    ("3r^2", False, "R and r are different variables"),
    ("9R^2", False, "coefficient"),
])
add(M + "intermediate_algebra/1467.json", "8n^2 + 4n + 1", "expression", [
    ("1+4n+8n^2", True, "ascending order"),
    ("4n(2n+1)+1", True, "partly factored"),
    ("8n^2+4n", False, "missing constant"),
])
add(M + "intermediate_algebra/1210.json", "-13x+3", "expression", [
    ("3-13x", True, "commuted"),
    ("-13x + 3", True, "spacing"),
    ("13x-3", False, "negated"),
])

# --- equations ------------------------------------------------------------------------------------
add(M + "precalculus/323.json", "y = 2x + 3", "equation", [
    ("y=3+2x", True, "commuted right side"),
    ("y = 2x + 3", True, "identical"),
    ("2x+3", True, "right side of y = ... alone"),
    ("y-2x-3=0", True, "rearranged equation"),
    ("2y = 4x + 6", True, "scaled equation"),
    ("y = 3x + 2", False, "different line"),
    ("y = 2x - 3", False, "different intercept"),
])
add(M + "precalculus/356.json", "y = -2x", "equation", [
    ("y=-2x", True, "spacing"),
    ("2x+y=0", True, "rearranged"),
    ("-2x", True, "right side alone"),
    ("y=2x", False, "sign"),
])
add(M + "precalculus/659.json", "5x - 7y + 11z + 4 = 0", "equation", [
    ("-5x + 7y - 11z - 4 = 0", True, "equation times -1"),
    ("10x - 14y + 22z + 8 = 0", True, "equation times 2"),
    ("5x - 7y + 11z = -4", True, "constant moved"),
    ("5x - 7y + 11z - 4 = 0", False, "different plane"),
    ("5x - 7y + 11z + 4", False, "an expression is not the plane's equation"),
])
add(M + "algebra/2193.json", "x=5", "equation", [
    ("5", True, "x = 5 against its value"),
    ("x = 5", True, "identical"),
    ("x=6", False, "different value"),
    ("5 = x", True, "sides swapped"),
])
add(M + "algebra/1837.json", "5", "equation", [
    ("x = 5", True, "value given as an equation"),
    ("a=5", True, "any variable name"),
    ("x=-5", False, "wrong value"),
    ("2+3=5", True, "a true chain of constants ending in the value"),
    ("5=6", False, "a false equation is not the value"),
])

# --- inequalities and intervals -------------------------------------------------------------------
add(M + "intermediate_algebra/558.json", "(3,4]", "interval", [
    ("(3,4]", True, "identical"),
    ("(3, 4]", True, "spacing"),
    ("\\left(3,4\\right]", True, "left/right"),
    ("3 < x \\le 4", True, "inequality form"),
    ("(3,4)", False, "right end should be closed"),
    ("[3,4]", False, "left end should be open"),
    ("x \\in (3,4]", True, "set membership"),
])
add(M + "precalculus/695.json", "(-\\infty, 0]", "interval", [
    ("(-\\infty,0]", True, "spacing"),
    ("x \\le 0", True, "inequality"),
    ("x < 0", False, "0 excluded"),
    ("[-\\infty, 0]", True, "an infinite end is open however written"),
    ("(-\\infty, 0)", False, "open at 0"),
    ("0 \\geq x", True, "reversed inequality"),
])
add(M + "algebra/2043.json", "(-\\infty, 2) \\cup (3, \\infty)", "interval", [
    ("(3,\\infty) \\cup (-\\infty,2)", True, "union in the other order"),
    ("x < 2 \\text{ or } x > 3", True, "inequalities joined by or"),
    ("(-\\infty, 2] \\cup (3, \\infty)", False, "2 included"),
    ("(-\\infty, 3) \\cup (2, \\infty)", False, "covers everything"),
    ("(2,3)", False, "the complement"),
])
add(M + "intermediate_algebra/1992.json", "(0,9) \\cup (9,36)", "interval", [
    ("(0,9)\\cup(9,36)", True, "spacing"),
    ("(9,36) \\cup (0,9)", True, "order"),
    ("(0,36)", False, "9 must be excluded"),
])
add(M + "intermediate_algebra/183.json", "(2,\\infty)", "interval", [
    ("(2, \\infty)", True, "spacing"),
    ("x > 2", True, "inequality"),
    ("x \\geq 2", False, "2 included"),
    ("[2,\\infty)", False, "closed at 2"),
    ("(2,\\infty]", True, "infinity is never included"),
])
add(M + "algebra/101.json", "x \\in [-2,7]", "interval", [
    ("[-2,7]", True, "membership dropped"),
    ("-2 \\le x \\le 7", True, "chain"),
    ("(-2,7)", False, "open ends"),
    ("[-2, 7)", False, "7 excluded"),
])
add(M + "algebra/2486.json", "\\left(\\frac{3}{5},\\frac{8}{3}\\right]", "interval", [
    ("(0.6, 8/3]", True, "exact decimal endpoint"),
    ("\\left(\\frac35, \\frac83\\right]", True, "short fractions"),
    ("(\\frac{3}{5}, \\frac{8}{3})", False, "right end open"),
])
add(M + "precalculus/499.json", "\\left[ \\frac{\\pi^2}{8}, \\frac{5 \\pi^2}{4} \\right]", "interval", [
    ("[\\frac{\\pi^2}{8}, \\frac{5\\pi^2}{4}]", True, "left/right removed"),
    ("\\left[\\frac{1}{8}\\pi^2, 1.25\\pi^2\\right]", True, "rewritten endpoints"),
    ("[\\frac{\\pi^2}{8}, \\frac{5 \\pi^2}{4})", False, "right end open"),
])
add(M + "algebra/1078.json", "(-\\sqrt{3}, \\sqrt{3})", "interval", [
    ("(-\\sqrt3,\\sqrt3)", True, "short sqrt"),
    ("-\\sqrt{3} < x < \\sqrt{3}", True, "chain of inequalities"),
    ("|x| < \\sqrt{3}", True, "absolute-value inequality describes the same interval"),
    ("[-\\sqrt{3}, \\sqrt{3}]", False, "closed ends"),
])
add("synthetic", "x \\geq 5", "inequality", [
    ("x \\ge 5", True, "\\ge"),
    ("5 \\le x", True, "reversed"),
    ("[5, \\infty)", True, "interval"),
    ("x > 5", False, "strict"),
    ("x \\le 5", False, "direction"),
])

# --- tuples ---------------------------------------------------------------------------------------
add(M + "precalculus/807.json", "\\left( 3, \\frac{\\pi}{2} \\right)", "tuple", [
    ("(3, \\frac{\\pi}{2})", True, "no left/right"),
    ("(3,\\pi/2)", True, "slash"),
    ("(\\frac{\\pi}{2}, 3)", False, "order matters in a point"),
    ("(3, 90^\\circ)", True, "polar angle given in degrees"),
    ("(3, 1.5708)", True, "decimal within tolerance"),
])
add(M + "intermediate_algebra/956.json", "(6,31,-1)", "tuple", [
    ("(6, 31, -1)", True, "spacing"),
    ("(6,-1,31)", False, "order"),
    ("(6,31)", False, "missing component"),
    ("6, 31, -1", False, "a bare list is not the ordered triple"),
])
add(M + "intermediate_algebra/690.json", "(1,-16,-4,43)", "tuple", [
    ("(1, -16, -4, 43)", True, "spacing"),
    ("(1,-16,-4,34)", False, "last component"),
    ("\\left(1,-16,-4,43\\right)", True, "left/right"),
])
add(M + "geometry/538.json", "(8,-2)", "tuple", [
    ("(8,-2)", True, "identical"),
    ("(-2,8)", False, "order"),
    ("(8, -2.0)", True, "decimal zero"),
])
add(M + "precalculus/541.json", "\\left( \\frac{3}{2}, -13 \\right)", "tuple", [
    ("(1.5, -13)", True, "exact decimal"),
    ("(\\frac32,-13)", True, "short fraction"),
    ("(-13, \\frac{3}{2})", False, "order"),
])
add(M + "algebra/864.json", "(-1,6)", "tuple", [
    ("(-1, 6)", True, "spacing"),
    ("(6,-1)", False, "order"),
    ("(-1,6,0)", False, "extra component"),
])
add(M + "intermediate_algebra/47.json", "(-2,1)", "tuple", [
    ("(-2,1)", True, "identical"),
    ("(1,-2)", False, "order"),
    ("(-2, 1.0)", True, "decimal zero"),
])

# --- sets, lists, plus-minus ----------------------------------------------------------------------
add(M + "intermediate_algebra/1388.json", "1,-2", "set", [
    ("-2, 1", True, "solutions in any order"),
    ("1, -2", True, "identical order"),
    ("\\{1, -2\\}", True, "set braces"),
    ("x = 1, x = -2", True, "as equations"),
    ("1", False, "one solution missing"),
    ("1, -2, 3", False, "an extra solution"),
    ("x=1 \\text{ or } x=-2", True, "solutions joined by or"),
    ("1, 2", False, "sign of one solution"),
])
add(M + "intermediate_algebra/428.json", "3, 5, 7", "set", [
    ("7, 5, 3", True, "reversed"),
    ("3,5,7", True, "spacing"),
    ("3, 5", False, "missing one"),
    ("3, 5, 7, 9", False, "one extra"),
    ("\\{3,5,7\\}", True, "set"),
])
add(M + "intermediate_algebra/662.json", "1 \\pm \\sqrt{19}", "plusminus", [
    ("1+\\sqrt{19}, 1-\\sqrt{19}", True, "both values listed"),
    ("1-\\sqrt{19}, 1+\\sqrt{19}", True, "other order"),
    ("1 \\pm \\sqrt{19}", True, "identical"),
    ("1+\\sqrt{19}", False, "only one of the two"),
    ("\\sqrt{19} \\pm 1", False, "different pair"),
    ("x = 1 \\pm \\sqrt{19}", True, "as an equation"),
])
add(M + "precalculus/768.json", "3 \\pm 2 \\sqrt{2}", "plusminus", [
    ("3+2\\sqrt{2}, 3-2\\sqrt{2}", True, "both listed"),
    ("3 \\pm \\sqrt{8}", True, "sqrt(8) = 2 sqrt(2)"),
    ("3 \\mp 2\\sqrt{2}", True, "mp gives the same two values"),
    ("3 + 2\\sqrt{2}", False, "one value"),
])
add(M + "intermediate_algebra/2015.json", "\\{1\\pm\\sqrt{5},-2\\}", "plusminus", [
    ("-2, 1+\\sqrt{5}, 1-\\sqrt{5}", True, "three values in another order"),
    ("\\{-2, 1 \\pm \\sqrt{5}\\}", True, "set in another order"),
    ("1+\\sqrt{5}, 1-\\sqrt{5}", False, "missing -2"),
    ("-2, 1+\\sqrt{5}", False, "missing one root"),
])
add(M + "intermediate_algebra/1102.json", "-2,1", "set", [
    ("1,-2", True, "order"),
    ("-2 \\text{ and } 1", True, "joined by and"),
    ("-2", False, "only one"),
])

# --- matrices and vectors -------------------------------------------------------------------------
add(M + "precalculus/920.json", "\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", "matrix", [
    ("\\begin{bmatrix} -1 & 0 \\\\ 0 & -1 \\end{bmatrix}", True, "bmatrix"),
    ("\\begin{pmatrix}-1&0\\\\0&-1\\end{pmatrix}", True, "spacing"),
    ("\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}", False, "identity, not its negative"),
    ("\\begin{pmatrix} -1 & 0 & 0 & -1 \\end{pmatrix}", False, "shape"),
    ("-1", False, "a number is not a matrix"),
])
add(M + "precalculus/1300.json", "\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}", "matrix", [
    ("\\begin{pmatrix} -\\frac{1}{3} \\\\ \\frac{2}{3} \\\\ \\frac{5}{3} \\end{pmatrix}", True, "frac entries"),
    ("\\left(-\\frac13, \\frac23, \\frac53\\right)", True, "a column vector written as a tuple"),
    ("\\begin{pmatrix} -1/3 \\\\ 5/3 \\\\ 2/3 \\end{pmatrix}", False, "entries swapped"),
    ("\\begin{pmatrix} -0.3333 \\\\ 0.6667 \\\\ 1.6667 \\end{pmatrix}", True, "decimal entries within tolerance"),
])
add(M + "precalculus/263.json", "\\begin{pmatrix} -2 \\\\ -14 \\\\ -7 \\end{pmatrix}", "matrix", [
    ("\\begin{pmatrix}-2\\\\-14\\\\-7\\end{pmatrix}", True, "spacing"),
    ("\\begin{pmatrix} 2 \\\\ 14 \\\\ 7 \\end{pmatrix}", False, "negated"),
    ("\\begin{pmatrix} -2 \\\\ -14 \\end{pmatrix}", False, "missing entry"),
])
add(M + "precalculus/398.json", "\\begin{pmatrix} 1/5 \\\\ -18/5 \\end{pmatrix}", "matrix", [
    ("\\begin{pmatrix} 0.2 \\\\ -3.6 \\end{pmatrix}", True, "exact decimals"),
    ("\\begin{pmatrix} \\frac{1}{5} \\\\ -\\frac{18}{5} \\end{pmatrix}", True, "fractions"),
    ("\\begin{pmatrix} 1/5 \\\\ 18/5 \\end{pmatrix}", False, "sign"),
])

# --- multiple choice ------------------------------------------------------------------------------
add(M + "precalculus/819.json", "\\text{(C)}", "choice", [
    ("\\text{(C)}", True, "identical"),
    ("C", True, "bare letter"),
    ("(C)", True, "letter in parentheses"),
    ("\\textbf{(C)}", True, "bold letter"),
    ("@The answer is (C).", True, "answer sentence"),
    ("(D)", False, "other letter"),
    ("\\text{(C) or (D)}", False, "hedging between letters"),
])
add(M + "precalculus/452.json", "\\text{(E)}", "choice", [
    ("E", True, "bare letter"),
    ("\\mathrm{(E)}", True, "upright letter"),
    ("(A)", False, "other letter"),
])
add(M + "intermediate_algebra/754.json", "\\text{(B)}", "choice", [
    ("B", True, "bare letter"),
    ("(B) \\ 12", True, "letter followed by the option's value"),
    ("(C)", False, "other letter"),
])

# --- plain text -----------------------------------------------------------------------------------
add(M + "algebra/1349.json", "\\text{Evelyn}", "text", [
    ("\\text{Evelyn}", True, "identical"),
    ("Evelyn", True, "no text command"),
    ("evelyn", True, "case"),
    ("\\text{Navin}", False, "other name"),
    ("\\text{Evelyn or Navin}", False, "hedging between names"),
])
add(M + "prealgebra/105.json", "\\text{east}", "text", [
    ("East", True, "capitalised"),
    ("\\text{east}", True, "identical"),
    ("west", False, "other direction"),
])
add(M + "intermediate_algebra/860.json", "\\text{ellipse}", "text", [
    ("\\text{an ellipse}", True, "article ignored"),
    ("\\text{Ellipse}", True, "case"),
    ("\\text{parabola}", False, "other conic"),
    ("\\text{hyperbola}", False, "other conic"),
])
add(M + "intermediate_algebra/128.json", "\\text{even}", "text", [
    ("\\text{even}", True, "identical"),
    ("even", True, "bare word"),
    ("\\text{odd}", False, "opposite"),
    ("\\text{neither}", False, "other option"),
])

# --- numerals in a base ---------------------------------------------------------------------------
add(M + "number_theory/1257.json", "204_5", "base", [
    ("204_5", True, "identical"),
    ("204_{5}", True, "braced base"),
    ("204", True, "subscript left out: the digits are the answer"),
    ("54", False, "the decimal value, not the base-5 numeral that was asked for"),
    ("402_5", False, "digits reversed"),
])
add(M + "number_theory/847.json", "4210_{5}", "base", [
    ("4210_5", True, "unbraced base"),
    ("4210", True, "digits only"),
    ("4201_5", False, "digits swapped"),
])
add(M + "number_theory/864.json", "52_8", "base", [
    ("52_8", True, "identical"),
    ("52_{8}", True, "braced base"),
    ("42", False, "decimal value instead of the octal numeral"),
    ("52_9", False, "different base"),
])

# --- infinity -------------------------------------------------------------------------------------
add("synthetic", "\\infty", "infinity", [
    ("\\infty", True, "identical"),
    ("infinity", True, "word"),
    ("-\\infty", False, "negative infinity"),
    ("10^{100}", False, "a large number is not infinity"),
])
add(M + "counting_and_probability/525.json", "144", "infinity", [
    ("\\infty", False, "infinity for a number"),
    ("144", True, "identical"),
])

# --- extraction -----------------------------------------------------------------------------------
add(M + "counting_and_probability/134.json", "720", "extraction", [
    ("@We first count ... so there are $6! = 720$ ways. The final answer is $\\boxed{720}$.", True, "boxed"),
    ("@Hence the count is \\fbox{720}.", True, "fbox"),
    ("@The final answer is 720.", True, "final answer sentence"),
    ("@The final answer is $720$. I hope it is correct.", True, "Minerva-style final answer"),
    ("@Final Answer: 720", True, "final answer with colon"),
    ("@So the answer is: 720.", True, "the answer is"),
    ("@Answer: 720", True, "answer label at line start"),
    ("@**720**", True, "markdown bold"),
    ("@We get 6! = 720", True, "trailing number"),
    ("@$$720$$", True, "display math only"),
    ("@\\boxed{720", False, "unclosed box: no answer"),
    ("@I first tried \\boxed{720} but that overcounts; the answer is \\boxed{360}.", False, "the last box counts"),
    ("@\\boxed{360} is wrong; correct: \\boxed{720}", False, "two different boxes are several final answers (a hedge)"),
    ("@Counting gives 720 ways in total if order matters, but it does not.", False, "no answer cue and no trailing answer"),
    ("@\\boxed 720", True, "box without braces"),
    ("@The final answer is $\\boxed{\\text{720}}$", True, "text inside the box"),
])
add(M + "algebra/1265.json", "\\frac{3}{2}", "extraction", [
    ("@Thus the slope is $\\boxed{\\frac{3}{2}}$.", True, "nested braces in a box"),
    ("@Thus the slope is $\\boxed{\\dfrac{3}{2}}$.", True, "dfrac inside a box"),
    ("@The answer is $\\frac{3}{2}$.", True, "math after 'the answer is'"),
    ("@The answer is \\(\\frac{3}{2}\\).", True, "inline math delimiters"),
    ("@\\[ \\boxed{\\frac{3}{2}} \\]", True, "display math with a box"),
    ("@The answer is $\\frac{2}{3}$.", False, "reciprocal"),
])
add(M + "counting_and_probability/666.json", "225", "think", [
    ("@<think>Maybe \\boxed{200}? Let me recount.</think>\nThe final answer is \\boxed{225}.", True, "answer after the think block"),
    ("@<think>I get \\boxed{225}.</think>\nThe final answer is \\boxed{200}.", False, "think content is ignored when an answer follows"),
    ("@<think>Counting carefully gives \\boxed{225}.</think>", True, "no answer after the think block: its content is used"),
    ("@<think>Counting carefully gives 225", True, "unfinished thinking still has a trailing answer"),
])

# --- hedges and reward hacking --------------------------------------------------------------------
add(M + "algebra/2214.json", "4", "hedge", [
    ("4 \\text{ or } 5", False, "hedged between two values"),
    ("4, 5", False, "a list for a single-valued answer"),
    ("\\boxed{4} \\text{ or } \\boxed{5}", False, "two boxes side by side are one hedged answer"),
    ("@The answer is \\boxed{4} or \\boxed{5}.", False, "boxes joined by or"),
    ("@The answer is \\boxed{4}, \\boxed{4}.", True, "the same value boxed twice is not a hedge"),
    ("\\{1, 2, 3, 4, 5, 6\\}", False, "every candidate listed"),
    ("\\pm 4", False, "plus-minus gives two values"),
    ("", False, "empty box"),
    ("\\quad", False, "a box with only spacing"),
    ("x", False, "a variable is not a number"),
    ("@", False, "empty response"),
    ("@The answer is", False, "an answer cue with nothing after it"),
    ("4 = 5", False, "a false equation"),
    ("\\infty", False, "infinity for a number"),
    ("\\frac{0}{0}", False, "undefined value"),
    ("\\frac{4}{0}", False, "division by zero"),
    ("0^0", False, "0^0 is not 4"),
    ("@" + "\\boxed{1} " * 3 + "\\boxed{2} \\boxed{3} \\boxed{4}", False, "a run of boxes is a shotgun answer"),
    ("4 \\text{ and } 5", False, "hedged with and"),
    ("\\text{either 4 or 5}", False, "hedge in words"),
    ("x \\in \\mathbb{R}", False, "a set of all reals"),
    ("[3, 5]", False, "an interval around the answer"),
    ("__import__('os').system('true')", False, "code is never executed, just text"),
    ("\\mathrm{4}", True, "a roman 4 is 4"),
])
add(M + "intermediate_algebra/623.json", "0", "hedge", [
    ("0", True, "identical"),
    ("5 0", False, "two numbers side by side are not the product 5*0"),
    ("x - x", True, "an expression that is identically zero"),
    ("0 \\cdot \\infty", False, "undefined product"),
    ("\\frac{0}{0}", False, "undefined quotient is never zero"),
    ("0, 1", False, "a list for a single value"),
    ("-0", True, "negative zero is zero"),
])
add(M + "precalculus/285.json", "6", "hedge", [
    ("6, 6", False, "a repeated value in one box is a list"),
    ("\\text{6}", True, "number in a text box"),
    ("6^{1}", True, "trivial power"),
    ("\\sqrt{36}", True, "an expression equal to 6"),
    ("\\pm\\sqrt{36}", False, "two values"),
    ("5.9999", False, "an approximation of an integer is not the integer"),
    ("6.0000001", False, "an approximation of an integer is not the integer"),
])

# --- huge values: fail fast -----------------------------------------------------------------------
add("synthetic", "1", "huge", [
    ("2003^{2002^{2001}}", "error", "a tower too large to evaluate: reported as a verifier failure, fast"),
    ("1^{2002^{2001}}", True, "1 to any power is 1"),
])
add("synthetic", "2003^{2002^{2001}}", "huge", [
    ("2003^{2002^{2001}}", True, "identical tower"),
    ("2002^{2003^{2001}}", "error", "two different towers cannot be evaluated"),
])
add("synthetic", "10^{100}", "huge", [
    ("10^{100}", True, "a googol is fine"),
    ("100^{50}", True, "equal power"),
    ("10^{101}", False, "different power"),
])
add("synthetic", "100!", "huge", [
    ("100!", True, "identical"),
    ("100 \\cdot 99!", True, "equal product"),
    ("99!", False, "different factorial"),
])


# --- MATH-500 references that are equal to one another --------------------------------------------
# Pairs of distinct MATH-500 reference strings that are the same answer, each with the reason. The
# self-consistency test checks every ordered pair (a, b) with a < b, `verify(a, "\boxed{b}")`: these are
# the pairs that must be correct, and every other pair must be wrong.
EQUIVALENT_REFERENCES: list[tuple[tuple[str, str], str]] = [
    (("-2,1", "1,-2"), "the same two solutions in another order"),
    (("10,\\!080", "10080"), "thousands separator"),
    (("120", "120^\\circ"), "a degree sign is a unit, not part of the value"),
    (("15", "15\\mbox{ cm}^2"), "a unit is not part of the value"),
    (("180^\\circ", "\\pi"), "180 degrees is pi radians"),
    (("2 \\sqrt{5}", "2\\sqrt{5}"), "spacing"),
    (("30", "30^\\circ"), "degree sign"),
    (("36", "36^\\circ"), "degree sign"),
    (("36", "40_9"), "40 in base 9 is 36"),
    (("36", "\\$36"), "currency sign"),
    (("36^\\circ", "40_9"), "40 in base 9 is 36 (the degree sign is a unit)"),
    (("36^\\circ", "\\$36"), "both are 36 with a unit"),
    (("42", "52_8"), "52 in base 8 is 42"),
    (("5", "x=5"), "x = 5 gives the value 5"),
    (("90", "90^\\circ"), "degree sign"),
    (("\\frac14", "\\frac{1}{4}"), "\\frac14 reads one digit per argument"),
]
