"""The bash syntax layer of the launch-script reader (tree-sitter-bash) and the word evaluation."""
from __future__ import annotations

import pytest

from tilake.errors import TilakeError
from tilake.ingest.scan.bash_tree import parse_bash, parse_commands
from tilake.ingest.scan.shell import Shell


@pytest.mark.parametrize("text,message", [
    ("A=1\npython3 -m verl.x \"oops\nB=2\n", "line 2: unterminated double quote"),
    ("python3 -m verl.x data.x='oops\n", "line 1: unterminated single quote"),
    ("A=(x y\nB=2\n", "line 1: unterminated array A=("),
    ("X=`date\n", "line 1: unterminated backquote"),
    ("X=$(date\n", "line 1: unterminated command substitution"),
    ("if true; then\n A=1\n", "line 1: unterminated if (no fi)"),
])
def test_syntax_errors_name_the_line_of_the_unclosed_construct(text, message):
    with pytest.raises(TilakeError) as e:
        parse_commands(text, "s.sh")
    assert message in str(e.value) and "s.sh" in str(e.value)


def test_commands_carry_nesting_pipelines_and_offsets():
    text = ("# 注释 non-ASCII before the words\nexport A=1 B=(x \"y z\")\n"
            "f() { T=8; }\nif [ -n \"$X\" ]; then C=2; fi\n"
            "cat <<'E'\npython3 -m verl.no\nE\n"
            "X=1 python3 -m verl.x a=$((1+2)) \"${ARR[@]}\" 2>&1 | tee l.log\n")
    cmds = parse_commands(text, "s.sh")
    by_first = {c.words[0].raw if c.words else c.arrays[0].name: c for c in cmds}
    exp = by_first["export"]
    assert [w.raw for w in exp.words] == ["export", "A=1"] and exp.arrays[0].name == "B"
    assert [e.raw for e in exp.arrays[0].elements] == ["x", '"y z"']
    assert by_first["T=8"].in_function and by_first["T=8"].function == "f"
    assert by_first["C=2"].conditional and not by_first["export"].conditional
    assert "cat" in by_first and not any(w.raw == "verl.no" for c in cmds for w in c.words)   # heredoc = data
    launch = by_first["X=1"]
    assert [w.raw for w in launch.words] == ["X=1", "python3", "-m", "verl.x", "a=$((1+2))", '"${ARR[@]}"']
    assert [r.raw for r in launch.redirs] == ["2>&1"] and launch.pipeline == ["python3", "tee"]
    for w in launch.words:                      # character offsets, past the non-ASCII comment
        assert text[w.start:w.end] == w.raw


def test_bare_references_and_whether_bash_surely_evaluates_them():
    text = ("if [ $X ]; then echo $Y; fi\n[ -z $Z ] && echo $W\nf(){ echo $V; }\n"
            "echo ${Q:-1} $H\ncat <<'E'\n$NO\nE\n")
    refs = [(r.name, r.line, r.certain) for r in parse_bash(text, "s.sh").refs]
    assert refs == [("X", 1, True), ("Y", 1, False), ("Z", 2, True), ("W", 2, False), ("V", 3, False),
                    ("H", 4, True)]


def test_quoted_all_elements_of_nothing_is_no_field():
    sh = Shell({}, args=[])
    sh.vars["E"] = []
    assert sh.expand_word('"$@"') == [] and sh.expand_word('"${E[@]}"') == []
    assert sh.expand_word('""') == [""] and sh.expand_word('"x$@"') == ["x"]
    assert Shell({}, args=["a b", "c"]).expand_word('"$@"') == ["a b", "c"]


def test_right_of_and_or_is_conditional(tmp_path):
    from tilake.ingest.scan.script import UNKNOWN, parse_script
    s = tmp_path / "s.sh"
    s.write_text('[ -z "$TP" ] && TP=7\nN=2\n[ -d /nope ] || N=3\n'
                 "python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.tensor_model_parallel_size=$TP "
                 "actor_rollout_ref.rollout.n=$N\n")
    p = parse_script(s, env={"TP": "3"})
    # bash keeps TP=3 here and N depends on /nope: neither is guessed
    assert p.config["infer_tp"] == UNKNOWN and p.config["rollout_n"] == UNKNOWN
    assert "conditional block (line 1)" in p.sources["infer_tp"]
