"""BFCL function-calling tasks: the OpenAI `tools` a task declares, and the AST grader for the calls a
server parsed. Reasons: docs/evals.md#the-bfcl-grader.
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass
from typing import Any

from benchd.stats.notation import plural

GORILLA_TO_OPENAPI: dict[str, str] = {
    "integer": "integer", "number": "number", "float": "number", "string": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "dict": "object", "object": "object",
    "tuple": "array", "any": "string", "byte": "integer", "short": "integer", "long": "integer",
    "double": "number", "char": "string", "ArrayList": "array", "Array": "array", "HashMap": "object",
    "Hashtable": "object", "Queue": "array", "Stack": "array", "Any": "string", "String": "string",
    "Bigint": "integer",
}
_PYTHON_TYPES: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list,
                                  "tuple": list, "dict": dict, "any": str}
_NESTED = ("array", "tuple")


@dataclass(frozen=True)
class Call:
    """One parsed tool call: the name as the server returned it and its decoded arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Verdict:
    passed: bool
    failure: str | None = None
    detail: str = ""
    parameter: str | None = None


PASS = Verdict(True, None, "matches a possible answer")


def openai_name(name: str) -> str:
    return name.replace(".", "_")


def openai_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The task's functions as OpenAI `tools` (BFCL's conversion for OpenAI-style models)."""
    out = []
    for fn in copy.deepcopy(functions):
        fn["name"] = openai_name(fn["name"])
        fn["parameters"]["type"] = "object"
        fn["parameters"]["properties"] = _cast(fn["parameters"].get("properties", {}))
        out.append({"type": "function", "function": fn})
    return out


def original_name(name: str, functions: list[dict[str, Any]]) -> str:
    """The task's own (possibly dotted) name for a name the server returned."""
    for fn in functions:
        if openai_name(fn["name"]) == name or fn["name"] == name:
            return str(fn["name"])
    return name


def _cast(properties: dict[str, Any]) -> dict[str, Any]:
    for value in properties.values():
        kind = value.get("type")
        if kind == "float":
            value["format"] = "float"
            value["description"] = value.get("description", "") + " This is a float type value."
        value["type"] = GORILLA_TO_OPENAPI.get(kind, "string")  # no type: "string"
        if value["type"] in ("array", "object"):
            _cast_nested(value)
    return properties


def _cast_nested(value: dict[str, Any]) -> None:
    if "properties" in value:
        value["properties"] = _cast(value["properties"])
    elif "items" in value:
        items = value["items"]
        items["type"] = GORILLA_TO_OPENAPI.get(items.get("type", "string"), "string")
        if items["type"] == "array" and "items" in items:
            items["items"]["type"] = GORILLA_TO_OPENAPI.get(items["items"].get("type", "string"), "string")
        elif items["type"] == "object" and "properties" in items:
            items["properties"] = _cast(items["properties"])


def grade(category: str, functions: list[dict[str, Any]], answer: list[dict[str, Any]] | None,
          calls: list[Call]) -> Verdict:
    """Grade the parsed calls of one task of `category` against BFCL's possible answer."""
    if category == "irrelevance" or answer is None:
        if calls:
            return Verdict(False, "extra_call", f"no call was the right answer; got {[c.name for c in calls]}")
        return Verdict(True, None, "no call, as expected")
    if not calls:
        return Verdict(False, "no_call", f"expected {plural(len(answer), 'call')}, got none")
    if len(calls) != len(answer):
        failure = "extra_call" if len(calls) > len(answer) else "no_call"
        return Verdict(False, failure, f"Wrong number of functions: expected {len(answer)}, got {len(calls)}")
    if "parallel" in category:
        return _parallel(functions, answer, calls)
    expected = next(iter(answer[0]))
    return _check_call(_find(functions, expected), calls[0], answer[0])


def _find(functions: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for fn in functions:
        if fn["name"] == name:
            return fn
    return functions[0]


def _parallel(functions: list[dict[str, Any]], answer: list[dict[str, Any]], calls: list[Call]) -> Verdict:
    matched: set[int] = set()
    for possible in answer:
        expected = next(iter(possible))
        desc = _find(functions, expected)
        failures: list[Verdict] = []
        for i, call in enumerate(calls):
            if i in matched:
                continue
            v = _check_call(desc, call, possible)
            if v.passed:
                matched.add(i)
                break
            failures.append(v)
        else:
            same_name = [f for f in failures if f.failure != "wrong_function"]
            best = same_name[0] if same_name else failures[0] if failures else Verdict(False, "no_call")
            return Verdict(False, best.failure, f"no call matches the expected {expected}: {best.detail}",
                           best.parameter)
    return PASS


def _mismatch(param: str, detail: str) -> Verdict:
    return Verdict(False, "argument_mismatch", detail, param)


def _check_call(desc: dict[str, Any], call: Call, possible_answer: dict[str, Any]) -> Verdict:
    allowed: dict[str, list[Any]] = next(iter(possible_answer.values()))
    name = openai_name(desc["name"])
    if call.name != name:  # exactly the name sent: an undeclared dotted spelling (`math.factorial`) fails
        return Verdict(False, "wrong_function", f"Function name {name!r} not found in model output (got {call.name!r}).")
    details = desc["parameters"]["properties"]
    args = call.arguments
    required = ((p, f"Missing required parameter: {p!r}.") for p in desc["parameters"].get("required", [])
                if p not in args)
    given = ((p, _argument_problem(p, v, details, allowed)) for p, v in args.items())
    optional = ((p, f"Optional parameter {p!r} not provided and not marked as optional.")
                for p, values in allowed.items() if p not in args and "" not in values)
    return next((_mismatch(p, why) for p, why in itertools.chain(required, given, optional) if why), PASS)


def _invalid(param: str, value: object, allowed: list[Any]) -> str:
    return f"Invalid value for parameter {param!r}: {value!r}. Expected one of {allowed}."


def _argument_problem(param: str, value: Any, details: dict[str, Any], allowed: dict[str, list[Any]]) -> str:
    if param not in details or param not in allowed:
        return f"Unexpected parameter: {param!r}."
    kind = details[param]["type"]
    expected_type = _PYTHON_TYPES.get(kind, str)
    nested = None
    if kind in _NESTED:
        nested = _PYTHON_TYPES.get(details[param].get("items", {}).get("type", "string"), str)
    if kind == "float" and type(value) is int:
        value = float(value)
    ok, is_variable, why = _type_check(param, value, allowed[param], kind, expected_type, nested)
    if not ok:
        return why
    if is_variable:
        return "" if value in allowed[param] else _invalid(param, value, allowed[param])
    return _value_problem(param, value, allowed[param], expected_type, nested)


def _value_problem(param: str, value: Any, allowed: list[Any], expected: type, nested: type | None) -> str:
    if expected is dict:
        return _dict_check(param, value, allowed)
    if expected is list and nested is dict:
        return _list_dict_check(param, value, allowed)
    if expected is str:
        return _string_check(param, value, allowed)
    if expected is list:
        return _list_check(param, value, allowed)
    return "" if value in allowed else _invalid(param, value, allowed)


def _answer_type(values: list[object]) -> type | None:
    for v in values:
        if v != "":
            return type(v)
    return None


def _type_check(param: str, value: object, allowed: list[object], kind: str, expected: type,
                nested: type | None) -> tuple[bool, bool, str]:
    """(valid, is_variable, why): BFCL's one-level-deep type check."""
    answer_type = _answer_type(allowed)
    is_variable = answer_type is not None and answer_type is not expected
    if type(value) is expected:
        if nested is None or _nested_ok(param, value, allowed, nested):
            return True, is_variable, ""
        return False, False, (f"Nested type checking failed for parameter {param!r}. Expected outer type {kind} "
                              f"with inner type {nested}. Parameter value: {value!r}.")
    if answer_type is not None and type(value) is answer_type:
        return True, True, ""
    return False, False, (f"Incorrect type for parameter {param!r}. Expected type {kind}, got "
                          f"{type(value).__name__}. Parameter value: {value!r}.")


def _nested_ok(param: str, value: object, allowed: list[object], nested: type) -> bool:
    items = value if isinstance(value, list) else []
    return any(type(item) is not list or all(_type_check(param, v, item, str(nested), nested, None)[0]
                                             for v in items) for item in allowed)


_STANDARDISE = re.compile(r"[ ,./\-_*^]")


def standardize(text: str) -> str:
    return _STANDARDISE.sub("", text).lower().replace("'", '"')


def _string_check(param: str, value: str, allowed: list[object]) -> str:
    if standardize(value) in [standardize(a) for a in allowed if type(a) is str]:
        return ""
    return f"Invalid value for parameter {param!r}: {value!r}. Expected one of {allowed}. Case insensitive."


def _std_list(items: list[object]) -> list[object]:
    return [standardize(v) if type(v) is str else v for v in items]


def _list_check(param: str, value: list[object], allowed: list[object]) -> str:
    # BFCL standardises each possible answer element-wise, so the optional marker "" stands for [].
    if _std_list(value) in [_std_list(list(a)) for a in allowed if isinstance(a, list | str)]:
        return ""
    return _invalid(param, value, allowed)


def _dict_check(param: str, value: dict[str, Any], allowed: list[Any]) -> str:
    why = f"Invalid value for parameter {param!r}: no possible answer given."
    for possible in (a for a in allowed if a != ""):
        why = _dict_mismatch(value, possible)
        if not why:
            return ""
    return why


def _dict_mismatch(value: dict[str, Any], possible: dict[str, list[Any]]) -> str:
    for key, v in value.items():
        if key not in possible:
            return f"Unexpected dict key parameter: {key!r}."
        options = _std_list(possible[key])
        if _std_list([v])[0] not in options:
            return f"Invalid value for parameter {key!r}: {v!r}. Expected one of {options}."
    return next((f"Missing dict key parameter: {key!r}." for key, options in possible.items()
                 if key not in value and "" not in options), "")


def _list_dict_check(param: str, value: list[object], allowed: list[object]) -> str:
    why = "Wrong number of dictionaries in the list."
    for possible in allowed:
        if not isinstance(possible, list | str) or len(value) != len(possible):  # "" (optional) is []
            why = "Wrong number of dictionaries in the list."
            continue
        why = ""
        for got, want in zip(value, possible, strict=True):
            why = _dict_check(param, got, [want]) if isinstance(got, dict) else f"{param!r}: {got!r} is not a dict"
            if why:
                break
        if not why:
            return ""
    return why


def reference_calls(answer: list[dict[str, Any]]) -> list[Call]:
    """The calls a possible answer describes: each parameter's first non-`""` value."""
    calls = []
    for entry in answer:
        name, params = next(iter(entry.items()))
        calls.append(Call(openai_name(name), _first_values(params)))
    return calls


def _first_values(params: dict[str, list[Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, values in params.items():
        for v in values:
            if v != "":
                out[key] = _first_values(v) if isinstance(v, dict) else v
                break
    return out
