"""libcst building blocks shared by the transforms, and :class:`OptimizationCodemod`, the base of every
optimization's codemod.

Names are resolved from each file's bindings (:mod:`optimizations.program.names`, libcst's qualified names
without its full scope analysis), so ``from trl import SFTConfig as C``, ``import trl``
+ ``trl.SFTConfig`` and ``from trl.trainer.sft_config import SFTConfig`` all resolve to a name ending in
``SFTConfig`` under ``trl``. Keyword arguments are added in the call's own layout: one per line with the same
indent and trailing-comma style in a multi-line call, ``, `` separated on one line otherwise. Comments stay
where they were.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

import libcst as cst
from libcst.codemod import CodemodCommand, CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.helpers import parse_template_expression
from libcst.metadata import BaseMetadataProvider, ParentNodeProvider, QualifiedName

from optimizations.program.classes import repository_classes
from optimizations.program.names import scoped_names
from optimizations.program.positions import start_line
from optimizations.program.repository import VENDORED_PREFIX, ParsedFile, RepoContext, RuntimeHelper, Site
from optimizations.program.tree import children


class Identified(Protocol):
    """What a codemod needs of its optimization: the id its sites carry."""

    id: str


NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


def walk(node: cst.CSTNode, stop: tuple[type, ...] = NESTED_SCOPES) -> Iterator[cst.CSTNode]:
    """``node``'s descendants in source order, whitespace and punctuation left out (:func:`children`); nodes of
    a ``stop`` type are yielded but not entered."""
    for child in children(node):
        yield child
        if not isinstance(child, stop):
            yield from walk(child, stop)


@functools.cache
def node_hooks(
    codemod: type[cst.CSTTransformer],
) -> dict[type[cst.CSTNode], tuple[Callable | None, Callable | None]]:
    """The node types ``codemod`` overrides a ``visit_<Node>`` or ``leave_<Node>`` hook for, with those hooks."""
    hooks: dict[type[cst.CSTNode], tuple[Callable | None, Callable | None]] = {}
    for name in dir(codemod):
        kind, _, node_name = name.partition("_")
        if kind not in ("visit", "leave") or getattr(codemod, name) is getattr(
            cst.CSTTransformer, name, None
        ):
            continue
        node_type = getattr(cst, node_name, None)
        if not (isinstance(node_type, type) and issubclass(node_type, cst.CSTNode)):
            raise TypeError(f"{codemod.__qualname__}.{name}: not a hook on a libcst node type")
        visit, leave = hooks.get(node_type, (None, None))
        hooks[node_type] = (
            (getattr(codemod, name), leave) if kind == "visit" else (visit, getattr(codemod, name))
        )
    return hooks


def imported_modules(parsed: ParsedFile) -> frozenset[str]:
    """Modules the file imports plainly (``import x.y``, not aliased) outside functions and classes; read once
    per parse through ``parsed.derived``."""
    return frozenset(
        code_of(alias.name)
        for node in walk(parsed.module)
        if isinstance(node, cst.Import)
        for alias in node.names
        if alias.asname is None
    )


def expr(code: str) -> cst.BaseExpression:
    """Parse one Python expression."""
    return cst.parse_expression(code)


def call_expr(func: str, *args: cst.BaseExpression, **keywords: cst.BaseExpression) -> cst.Call:
    """``func(arg, ..., name=value, ...)`` on one line, the argument nodes filled into a libcst template."""
    slots = {f"arg{i}": arg for i, arg in enumerate(args)} | {f"kw_{k}": v for k, v in keywords.items()}
    code = [f"{{arg{i}}}" for i in range(len(args))] + [f"{k}={{kw_{k}}}" for k in keywords]
    return parse_template_expression(f"{func}({', '.join(code)})", **slots)


def parenthesized(node: cst.BaseExpression) -> cst.BaseExpression:
    """``(node)``: an operand that would otherwise bind differently inside a larger expression."""
    return node.with_changes(lpar=[cst.LeftParen(), *node.lpar], rpar=[*node.rpar, cst.RightParen()])


def code_of(node: cst.CSTNode) -> str:
    """The source text of a node."""
    return cst.Module(body=[]).code_for_node(node)


def qualified_under(names: Iterable[str], packages: Sequence[str], attrs: Iterable[str]) -> bool:
    """True when one of ``names`` is ``<package>.….<attr>`` for a package and attr given."""
    wanted = set(attrs)
    for name in names:
        head, _, last = name.rpartition(".")
        if last in wanted and any(head == p or head.startswith(p + ".") for p in packages):
            return True
    return False


# Data-loader classes that take torch's DataLoader arguments (num_workers, pin_memory, persistent_workers,
# prefetch_factor, collate_fn), as (package, class): torch's own, and torchdata's StatefulDataLoader, a subclass
# that can save its position mid-epoch (torchtune's recipes build one).
DATA_LOADERS = (("torch.utils.data", "DataLoader"), ("torchdata.stateful_dataloader", "StatefulDataLoader"))


def is_data_loader(names: Iterable[str]) -> bool:
    """True when one of ``names`` (a callee's qualified names) is a class of :data:`DATA_LOADERS`."""
    names = set(names)
    return any(qualified_under(names, (package,), (loader,)) for package, loader in DATA_LOADERS)


def assigned_target(
    parent: Callable[[cst.CSTNode], cst.CSTNode | None], value: cst.CSTNode
) -> cst.BaseAssignTargetExpression | None:
    """The target of ``target = value`` (or ``target: T = value``), where ``value`` is the whole right side;
    ``parent`` gives a node's holder."""
    holder = parent(value)
    if isinstance(holder, cst.Assign) and len(holder.targets) == 1:
        return holder.targets[0].target
    if isinstance(holder, cst.AnnAssign) and holder.value is value:
        return holder.target
    return None


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    """The keyword argument ``name=`` of a call, if given."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def star_kwargs(call: cst.Call) -> cst.Arg | None:
    """The ``**kwargs`` argument of a call, if any: settings hidden there cannot be seen."""
    for arg in call.args:
        if arg.star == "**":
            return arg
    return None


def literal_value(node: cst.BaseExpression) -> object:
    """The Python value of a simple literal (numbers, strings, True/False/None); ``...`` when not one."""
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
        return node.evaluated_value
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = literal_value(node.expression)
        return -inner if isinstance(inner, (int, float)) else ...
    return ...


def replace_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """The call with the value of ``name=`` replaced, layout and comments kept."""
    return call.with_changes(
        args=[arg.with_changes(value=value) if arg is keyword(call, name) else arg for arg in call.args]
    )


def _indent_before(call: cst.Call, index: int) -> cst.BaseParenthesizableWhitespace:
    """The whitespace that precedes argument ``index``: the previous comma's, or the one after ``(``."""
    if index == 0:
        return call.whitespace_before_args
    comma = call.args[index - 1].comma
    return comma.whitespace_after if isinstance(comma, cst.Comma) else cst.SimpleWhitespace(" ")


def add_keywords(call: cst.Call, items: Sequence[tuple[str, cst.BaseExpression]]) -> cst.Call:
    """Append ``name=value`` keyword arguments, in the layout the call already uses."""
    if not items:
        return call
    new_args = [
        cst.Arg(
            value=value,
            keyword=cst.Name(name),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
            ),
        )
        for name, value in items
    ]
    args = list(call.args)
    if not args:
        return call.with_changes(args=new_args)

    last = args[-1]
    arg_indent = _indent_before(call, len(args) - 1)
    multiline = isinstance(arg_indent, cst.ParenthesizedWhitespace)
    if not multiline:
        separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        # The last argument's trailing comma and the layout before ``)`` move to the new last argument.
        args[-1] = last.with_changes(comma=separator, whitespace_after_arg=cst.SimpleWhitespace(""))
        for arg in new_args[:-1]:
            args.append(arg.with_changes(comma=separator))
        args.append(
            new_args[-1].with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)
        )
        return call.with_changes(args=args)

    # Multi-line: each new argument on its own line, indented like the others.
    fresh_line = arg_indent.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
    if isinstance(last.comma, cst.Comma):
        # `a=1,  # note\n)`: keep the note on a's line; the closing layout moves to the new last argument.
        closing = last.comma.whitespace_after
        args[-1] = last.with_changes(
            comma=last.comma.with_changes(whitespace_after=_with_indent(closing, fresh_line))
        )
        for arg in new_args[:-1]:
            args.append(arg.with_changes(comma=cst.Comma(whitespace_after=fresh_line)))
        new_last_comma = cst.Comma(
            whitespace_after=_with_indent(fresh_line, closing).with_changes(
                first_line=cst.TrailingWhitespace()
            )
        )
        args.append(new_args[-1].with_changes(comma=new_last_comma))
    else:
        # `a=1\n)`: no trailing comma; the closing whitespace sits after the last argument.
        closing = last.whitespace_after_arg
        args[-1] = last.with_changes(
            comma=cst.Comma(whitespace_after=fresh_line), whitespace_after_arg=cst.SimpleWhitespace("")
        )
        for arg in new_args[:-1]:
            args.append(arg.with_changes(comma=cst.Comma(whitespace_after=fresh_line)))
        args.append(new_args[-1].with_changes(whitespace_after_arg=closing))
    return call.with_changes(args=args)


def _with_indent(
    whitespace: cst.BaseParenthesizableWhitespace, indent_from: cst.BaseParenthesizableWhitespace
) -> cst.BaseParenthesizableWhitespace:
    """``whitespace`` with the indentation (``indent``/``last_line``) of ``indent_from``."""
    if isinstance(whitespace, cst.ParenthesizedWhitespace) and isinstance(
        indent_from, cst.ParenthesizedWhitespace
    ):
        return whitespace.with_changes(indent=indent_from.indent, last_line=indent_from.last_line)
    return whitespace


def import_end(module: cst.Module) -> int:
    """Index in ``module.body`` just past the docstring and the last import before the first definition.

    Imports may follow other statements (``sys.path.insert(...)`` first, say): code placed here must come
    after all of them, or the names it uses would not be bound yet.
    """
    index = 0
    for position, statement in enumerate(module.body):
        if isinstance(statement, cst.SimpleStatementLine) and all(
            isinstance(s, (cst.Import, cst.ImportFrom))
            or (isinstance(s, cst.Expr) and isinstance(s.value, cst.SimpleString) and position == 0)
            for s in statement.body
        ):
            index = position + 1
        elif isinstance(statement, cst.Try) and _only_imports(statement.body):
            index = position + 1
        elif isinstance(statement, cst.If) and _only_imports(statement.body):
            index = position + 1
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            break
    return index


def _only_imports(block: cst.BaseSuite) -> bool:
    return isinstance(block, cst.IndentedBlock) and all(
        isinstance(s, cst.SimpleStatementLine)
        and all(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body)
        for s in block.body
    )


def insert_after_imports(module: cst.Module, statements: Sequence[cst.BaseStatement]) -> cst.Module:
    """The module with ``statements`` placed after its import block, set off by blank lines."""
    index = import_end(module)
    body = list(module.body)
    placed = list(statements)
    placed[0] = placed[0].with_changes(leading_lines=[cst.EmptyLine(), *placed[0].leading_lines])
    if index < len(body):
        following = body[index]
        if not following.leading_lines:
            body[index] = following.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    return module.with_changes(body=body[:index] + placed + body[index:])


def _is_import_line(statement: cst.BaseStatement) -> bool:
    """One ``import``/``from ... import`` alone on a line: what ``AddImportsVisitor`` counts as the import block."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], (cst.Import, cst.ImportFrom))
    )


def add_imports(context: CodemodContext, module: cst.Module) -> cst.Module:
    """The imports ``context`` asks for, added by libcst's ``AddImportsVisitor`` over the module's leading
    import block alone. The visitor reads and edits only that block (after a docstring) and the blank lines
    before the next statement, so that statement stands in as ``pass`` and the rest of the file is spliced
    back untouched instead of being traversed twice per codemod. An added import of a vendored helper moves
    below the file's ``sys.path`` setup, if it has one (:func:`_import_path_setup`), after the imports that
    follow it: the helper's package may be importable only from there. Not when the leading block imports that
    package already (Lightning-AI/litgpt's thunder script imports ``litgpt`` above its setup, and an import
    below it fails ruff's E402)."""
    body = module.body
    end = next((i for i in range(1, len(body)) if not _is_import_line(body[i])), len(body))
    if end == len(body):
        return AddImportsVisitor(context).transform_module(module)
    follower = body[end]
    stand_in = cst.SimpleStatementLine([cst.Pass()], leading_lines=follower.leading_lines)
    *head, moved = (
        AddImportsVisitor(context).transform_module(module.with_changes(body=[*body[:end], stand_in])).body
    )
    before = {id(statement) for statement in body[:end]}
    added = [statement for statement in head if id(statement) not in before]
    setup = _import_path_setup(body, end)
    importable = _top_level_packages(body[:end])  # the helper's package imported before the setup needs none
    vendored = (
        [
            statement
            for statement in added
            if _imports_vendored(statement) and _imported_package(statement) not in importable
        ]
        if setup is not None
        else []
    )
    if not vendored:
        return module.with_changes(
            body=[*head, follower.with_changes(leading_lines=moved.leading_lines), *body[end + 1 :]]
        )
    # A vendored helper is imported where the file's own first-party imports are: after the sys.path setup.
    head = [statement for statement in head if all(statement is not v for v in vendored)]
    after = setup + 1
    while after < len(body) and _is_import_line(body[after]):
        after += 1
    kept = moved.leading_lines if len(head) > end else follower.leading_lines
    vendored = [statement.with_changes(leading_lines=[]) for statement in vendored]
    return module.with_changes(
        body=[
            *head,
            follower.with_changes(leading_lines=kept),
            *body[end + 1 : after],
            *vendored,
            *body[after:],
        ]
    )


def _import_path_setup(body: Sequence[cst.BaseStatement], start: int) -> int | None:
    """The index of the last top-level ``sys.path`` change (``sys.path.append(...)``, ``.insert``, ``.extend``,
    an assignment) from ``start`` to the first definition: imports after it may need it."""
    found = None
    for index in range(start, len(body)):
        statement = body[index]
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            break
        if isinstance(statement, cst.SimpleStatementLine) and any(
            code_of(small)
            .replace(" ", "")
            .startswith(("sys.path.append(", "sys.path.insert(", "sys.path.extend("))
            or isinstance(small, (cst.Assign, cst.AugAssign))
            and code_of(small).replace(" ", "").startswith(("sys.path=", "sys.path+="))
            for small in statement.body
        ):
            found = index
    return found


def _imported_package(statement: cst.BaseStatement) -> str:
    """The top-level package a ``from package.module import ...`` line imports from ("" for a relative one)."""
    imported = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
    if not isinstance(imported, cst.ImportFrom) or imported.relative or imported.module is None:
        return ""
    return code_of(imported.module).partition(".")[0]


def _top_level_packages(statements: Sequence[cst.BaseStatement]) -> set[str]:
    """The top-level packages the import lines ``statements`` import absolutely."""
    found = set()
    for statement in statements:
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Import):
                found |= {code_of(alias.name).partition(".")[0] for alias in small.names}
            elif isinstance(small, cst.ImportFrom):
                found.add(_imported_package(statement))
    return found - {""}


def _imports_vendored(statement: cst.BaseStatement) -> bool:
    """``from [package.]_perfbot_<helper> import ...``: the import of a helper perfbot vendored."""
    imported = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
    module = code_of(imported.module) if isinstance(imported, cst.ImportFrom) and imported.module else ""
    return module.rpartition(".")[2].startswith(VENDORED_PREFIX)


def defines(module: cst.Module, name: str) -> bool:
    """True when the module's top level assigns or defines ``name``."""
    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and statement.name.value == name:
            return True
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                targets = []
                if isinstance(small, cst.Assign):
                    targets = [t.target for t in small.targets]
                elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
                    targets = [small.target]
                elif isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(
                    small.names, cst.ImportStar
                ):
                    targets = [a.asname.name if a.asname else a.name for a in small.names]
                if any(isinstance(t, cst.Name) and t.value == name for t in targets):
                    return True
    return False


class LazyMetadata(dict):
    """A codemod's metadata, each provider resolved on the file's wrapper the first time the codemod reads it:
    a file where a codemod finds nothing to ask about costs no scope or name analysis. The wrapper keeps what
    it resolves, so every codemod of the run shares one resolution per provider per file. Parents come from
    the file's shared node walk instead of another traversal."""

    def __init__(self, parsed: ParsedFile, providers: Collection[type[BaseMetadataProvider]]):
        super().__init__()
        self.parsed = parsed
        self.providers = frozenset(providers)

    def __contains__(self, provider: object) -> bool:
        return provider in self.providers

    def __missing__(self, provider: type[BaseMetadataProvider]) -> Mapping[cst.CSTNode, object]:
        if provider not in self.providers:
            raise KeyError(provider)
        if provider is ParentNodeProvider:
            self[provider] = resolved = self.parsed.parents()
        else:
            self[provider] = resolved = self.parsed.wrapper.resolve(provider)
        return resolved


class OptimizationCodemod(CodemodCommand, cst.CSTTransformer):
    """The codemod of one optimization over one file: the edits, and the sites it changes or refuses.

    A plain ``CSTTransformer``, not libcst's matcher-decoratable one: ``@m.visit``/``@m.call_if_inside``
    decorators are not supported, as checking every node for them made each pass about four times slower.

    :meth:`optimizations.registry.Optimization.transform_source` constructs it as ``codemod(context, optimization, repo)`` and runs
    it with :meth:`transform_parsed`: the file's path is ``context.filename``, sites carry ``optimization.id``,
    and ``repo`` is the repository the file is in (other files to read or edit, runtime helpers to vendor).
    """

    METADATA_DEPENDENCIES = ()

    def __init__(self, context: CodemodContext, optimization: Identified, repo: RepoContext):
        super().__init__(context)
        self.optimization = optimization
        self.repo = repo
        self.path = context.filename
        self.sites: list[Site] = []
        self.imported_modules: set[str] = set()
        self.parsed: ParsedFile | None = None
        # Only the sites are wanted (a scan): the edited tree is thrown away, so a codemod may skip building it.
        self.sites_only = False

    def transform_parsed(self, parsed: ParsedFile, *, sites_only: bool = False) -> cst.Module:
        """``transform_module`` over a file parsed once for the run: the metadata comes from the file's shared
        wrapper (each provider resolved once for every codemod), not from a copy of the tree. ``sites_only``:
        the caller reads ``sites`` alone, so the imports the edits need are not added."""
        self.parsed = parsed
        self.imported_modules = set(parsed.derived(imported_modules))
        self.sites_only = sites_only
        self.context = replace(self.context, wrapper=parsed.wrapper)
        self.metadata = LazyMetadata(parsed, self.get_inherited_dependencies())
        try:
            tree = self.transform_module_impl(parsed.module)
        finally:
            self.context = replace(self.context, wrapper=None)
            self.metadata = {}
        if sites_only:
            return tree
        if AddImportsVisitor.CONTEXT_KEY in self.context.scratch:
            tree = add_imports(self.context, tree)
        if RemoveImportsVisitor.CONTEXT_KEY in self.context.scratch:
            tree = RemoveImportsVisitor(self.context).transform_module(tree)
        return tree

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        hooked = (type(self).on_visit, type(self).on_leave) == (
            cst.CSTTransformer.on_visit,
            cst.CSTTransformer.on_leave,
        )
        if self.sites_only and hooked:
            self.run_hooks()
            return tree
        return tree.visit(self)

    def run_hooks(self) -> None:
        """Call this codemod's ``visit_<Node>``/``leave_<Node>`` hooks as a libcst pass over the file would, in the
        same order and with the same pruning (a ``visit_`` hook returning ``False`` skips the subtree), but over
        the file's shared walk and with nothing rebuilt: ``leave_`` gets the original node twice, and what it
        returns is dropped. For a scan, which keeps the sites and throws the edited tree away."""
        hooks = node_hooks(type(self))
        shared = self.parsed.walk()
        open_nodes: list[tuple[int, cst.CSTNode, Callable | None]] = []
        skip_until = -1
        for position in shared.positions(*hooks):
            while open_nodes and open_nodes[-1][0] <= position:
                _, done, leave = open_nodes.pop()
                if leave is not None:
                    leave(self, done, done)
            if position < skip_until:
                continue
            node = shared.nodes[position]
            visit, leave = hooks[type(node)]
            if visit is not None and visit(self, node) is False:
                skip_until = shared.ends[node]
            open_nodes.append((shared.ends[node], node, leave))
        for _, done, leave in reversed(open_nodes):
            if leave is not None:
                leave(self, done, done)

    def need_module(self, module: str) -> None:
        """``import <module>``, unless the file already has it anywhere at module level.

        libcst's ``AddImportsVisitor`` only looks at the leading import block, so a file whose imports follow
        another statement (``sys.path.insert(...)``) would get a second ``import`` from it.
        """
        if module not in self.imported_modules:
            AddImportsVisitor.add_needed_import(self.context, module)

    def import_runtime(self, helper: RuntimeHelper, name: str) -> None:
        """Vendor the run-time ``helper`` where this file can import it (:meth:`RepoContext.vendor`) and import
        ``name`` from it."""
        target = self.repo.vendor(helper, self.path, self.parsed.syntax())
        relative = 1 if target.startswith(".") else 0
        AddImportsVisitor.add_needed_import(self.context, target.lstrip("."), name, relative=relative)

    def nodes(self, *types: type[cst.CSTNode]) -> list[cst.CSTNode]:
        """The file's nodes of these types, in source order, from one walk shared by every codemod."""
        return self.parsed.nodes(*types)

    def names(self, node: cst.CSTNode) -> set[str]:
        """Fully qualified names a node (a call's callee, say) may refer to; for a class of the repository, also
        the classes outside it that it derives from (``mypkg.SFTConfig`` is a ``trl.SFTConfig`` too)."""
        qualified = self.qualified(node)
        ancestors = repository_classes(self.repo).ancestors(self.path, qualified) if qualified else ()
        return {q.name for q in qualified} | set(ancestors)

    def qualified(self, node: cst.CSTNode) -> frozenset[QualifiedName]:
        """libcst's qualified names of ``node`` (with their source: import, builtin, local) in this file."""
        return scoped_names(self.parsed).of(node)

    def repository_function(self, func: cst.BaseExpression) -> tuple[cst.FunctionDef, str] | None:
        """The top-level function of the repository that ``func`` (a call's callee) names, through this file's
        imports and the re-exports of the repository's modules, and the file that defines it; ``None`` when it
        is not one of the repository's."""
        index = repository_classes(self.repo)
        found = (index.function_definition(q.name, self.path) for q in self.qualified(func))
        return next(filter(None, found), None)

    def calls(self, node: cst.BaseExpression, function: str) -> bool:
        """``node`` is a call of ``function`` (a vendored helper, say), by its qualified or bare name."""
        return isinstance(node, cst.Call) and (
            any(n.rpartition(".")[2] == function for n in self.names(node.func))
            or (isinstance(node.func, cst.Name) and node.func.value == function)
        )

    def line(self, node: cst.CSTNode) -> int:
        return start_line(self.parsed, node)

    def changed(self, node: cst.CSTNode, message: str) -> None:
        self.sites.append(Site(self.path, self.line(node), self.optimization.id, message))

    def refused(self, node: cst.CSTNode, message: str, reason: str) -> None:
        self.sites.append(Site(self.path, self.line(node), self.optimization.id, message, False, reason))

    def already(self, node: cst.CSTNode, message: str) -> None:
        """The program already does it at ``node``: ``message`` says what (``TF32 on``, say)."""
        self.sites.append(
            Site(self.path, self.line(node), self.optimization.id, message, False, already=True)
        )
