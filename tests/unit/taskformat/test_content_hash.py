"""Harbor's environment_id: expected values computed with Harbor 0.25.0's own
`environment_content_hash` (harbor/environments/definition.py from the wheel) over the same
directory written to disk."""

from shipyard.taskformat.content_hash import environment_content_hash

FILES = {
    "Dockerfile": b"FROM debian:bookworm\nCOPY a.txt /a\n",
    "a.txt": b"hello\n",
    "sub/b.bin": b"x",
    "Zed": b"",
    "__pycache__/c.pyc": b"junk\n",
    ".DS_Store": b"j\n",
}


def test_matches_harbor_on_a_directory_with_ignored_files():
    assert environment_content_hash(FILES, dir_name="env") == "3e0ea077698c0abf6063f5054ff287ef"


def test_ignored_names_do_not_change_the_hash():
    kept = {k: v for k, v in FILES.items() if k not in ("__pycache__/c.pyc", ".DS_Store")}
    more = {**FILES, ".git/HEAD": b"ref: main\n", "sub/.DS_Store": b"z"}
    assert environment_content_hash(kept, dir_name="env") == environment_content_hash(
        more, dir_name="env")


def test_content_and_names_change_the_hash():
    base = environment_content_hash(FILES, dir_name="env")
    assert environment_content_hash({**FILES, "a.txt": b"hello!\n"}, dir_name="env") != base
    renamed = {("b.txt" if k == "a.txt" else k): v for k, v in FILES.items()}
    assert environment_content_hash(renamed, dir_name="env") != base


def test_empty_directory_hashes_the_image_else_the_directory_name():
    assert environment_content_hash({}, dir_name="empty",
                                    docker_image="python:3.12-slim") == \
        "1d0447543fac833cc86eed3edb0988e1"
    assert environment_content_hash({}, dir_name="empty") == "2e1cfa82b035c26cbbbdae632cea0705"
