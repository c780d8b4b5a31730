"""Where training signal comes from in one scope and how it spreads: the ``Scope`` of a
function, its loss, gradients and metric results, and propagation through assignments.
A mixin of ``FileFacts`` (``nozero.lint.facts.scopes``), sharing its state through
``self``."""

from __future__ import annotations

import ast
from functools import cached_property

from nozero.lint import vocab
from nozero.lint.facts.scope_ast import (
    _LOSS_ENTRY_METHODS,
    FunctionNode,
    Scope,
    _describes,
    _graphs_or_generators,
    _loss_returned,
    _names_gradients,
    _names_in,
    _parameters_given,
    _values_in,
    parameter_defaults,
    parameter_names,
    string_key,
)
from nozero.lint.imports import dotted_name, last_part


class SignalFacts:
    """Scopes and the sources of signal, the mixin part of ``FileFacts``."""

    # ---- scopes ---------------------------------------------------------------------
    def scope(self, key: int) -> Scope:
        """Facts for the function defined on line ``key`` (0: the module body)."""
        if key not in self._scopes:
            self._scopes[key] = Scope()  # guards recursion through helpers
            self._scopes[key] = self._compute_scope(key)
        return self._scopes[key]

    def _compute_scope(self, key: int) -> Scope:
        entry = self._functions.get(key)
        if entry is None:
            root: ast.AST = self.tree
            scope = Scope()
        else:
            root, enclosing = entry
            parent = self.scope(enclosing.lineno if enclosing else 0)
            # a name the function assigns itself is its own local: the enclosing scope's
            # ``labels`` (an aux output of ``value_and_grad``) is not the loss function's.
            # Parameters keep what an enclosing function knows (a ``lax.while_loop``
            # body's ``state`` is that function's state); a module's names reach its
            # functions only as globals.
            assigned = set().union(*(names for names, _ in self.bindings(root)))
            parameters = parameter_names(root)
            local = assigned - parameters if enclosing else assigned | parameters
            scope = Scope(
                parent.signal - local, parent.grad_functions - local, parent.flags - local
            )
        bindings = self.bindings(root)
        scope.not_signal = self._metric_results(bindings) | self._settings(root, bindings)
        if not self._sees_gradients(key):
            scope.not_signal |= vocab.AMBIGUOUS_SIGNAL_NAMES
        scope.not_signal |= _graphs_or_generators(self.nodes(root))
        self._propagate(bindings, scope)
        feeding = self._predictions_feeding_loss(root, bindings) | self._returned_loss(root)
        feeding -= scope.signal
        if feeding:
            scope.signal |= feeding
            self._propagate(bindings, scope)
        return scope

    def _returned_loss(self, root: ast.AST) -> set[str]:
        """What a loss function returns as its value (``return result``, ``return
        where(isfinite(result), result, 0)``): the loss, whatever it is called."""
        if not isinstance(root, FunctionNode) or not self.is_loss_function(root):
            return set()
        found: set[str] = set()
        for node in self.nodes(root):
            if not isinstance(node, ast.Return) or node.value is None:
                continue
            value = _loss_returned(node.value)
            if isinstance(value, ast.Call) and self.called(value.func) in (
                vocab.SELECTORS | vocab.SANITIZERS
            ):
                found |= {a.id for a in value.args if isinstance(a, ast.Name)}
            elif isinstance(value, ast.Name):
                found.add(value.id)
        return {n for n in found if not (vocab.is_metric_name(n) or vocab.is_measure_name(n))}

    def _metric_results(self, bindings: list[tuple[set[str], ast.expr]]) -> set[str]:
        """Names every binding of which is a metric's result (``loss = metric.compute()``
        in an evaluator): observations, whatever they are called."""
        only_metrics: dict[str, bool] = {}
        for names, value in bindings:
            measured = isinstance(value, ast.Call) and self.computes_metric(value)
            measured = measured or _running_statistic(value)
            for name in names:
                only_metrics[name] = only_metrics.get(name, True) and measured
        return {name for name, measured in only_metrics.items() if measured}

    @staticmethod
    def _settings(root: ast.AST, bindings: list[tuple[set[str], ast.expr]]) -> set[str]:
        """Parameters declared as settings (``focal_loss: bool = False``, ``mode: str``,
        ``cfg: TrainConfig``) that the function never re-binds: no tensor, whatever
        their name says."""
        if not isinstance(root, ast.FunctionDef | ast.AsyncFunctionDef):
            return set()
        args = root.args
        positional = [*args.posonlyargs, *args.args]
        defaults = parameter_defaults(root)
        rebound = set().union(*(names for names, _ in bindings))
        found = set()
        for arg in [*positional, *args.kwonlyargs]:
            default = defaults.get(arg.arg)
            annotation = last_part(dotted_name(arg.annotation) or "") if arg.annotation else ""
            declared = annotation in ("bool", "str") or vocab.is_config_name(annotation)
            if isinstance(default, ast.Constant) and isinstance(default.value, bool | str):
                declared = True
            if isinstance(default, ast.Name) and default.id.isupper():
                declared = True  # ``params=PARAMS``: a module's constant table of settings
            if declared and arg.arg not in rebound:
                found.add(arg.arg)
        return found

    def _sees_gradients(self, key: int) -> bool:
        """Does the function on line ``key`` (or one around it, or its optimizer class)
        handle gradients: a name or call that says so? Only there is ``g`` a gradient;
        elsewhere it is a graph or a random generator."""
        memo = ("gradients", str(key))
        if memo not in self._helper_memo:
            entry = self._functions.get(key)
            root: ast.AST = entry[0] if entry else self.tree
            enclosing = entry[1] if entry else None
            self._helper_memo[memo] = (
                key in self._optimizer_methods
                or any(_names_gradients(node) for node in self.nodes(root))
                or (enclosing is not None and self._sees_gradients(enclosing.lineno))
            )
        return self._helper_memo[memo]

    def _propagate(self, bindings: list[tuple[set[str], ast.expr]], scope: Scope) -> None:
        """Grow ``scope`` through its bindings until nothing new is learned."""
        changed = True
        while changed:
            changed = False
            for names, value in bindings:
                plain = {n for n in names if not vocab.is_metric_name(n)}
                carriers = plain - scope.not_signal  # not a metric result or a running mean
                if self._is_grad_transform(value, scope) and not plain <= scope.grad_functions:
                    scope.grad_functions |= plain
                    changed = True
                if not carriers <= scope.signal and self.is_signal(value, scope):
                    scope.signal |= carriers
                    changed = True
                if not names <= scope.flags and self.is_nonfinite_test(value, scope, self.source):
                    scope.flags |= names
                    changed = True

    def _predictions_feeding_loss(
        self, root: ast.AST, bindings: list[tuple[set[str], ast.expr]]
    ) -> set[str]:
        """A model's outputs (``logits = self.head(x)``, ``out = model.apply(p, x)`` and
        what is computed from them) that the scope's loss is computed from: cleaning those
        hides a NaN the model produced. Inputs and labels reach the loss too, but come from
        the data: cleaning them is input cleaning."""
        fed = self._names_reaching_a_loss(root, bindings)
        if not fed:  # most scopes compute no loss: nothing to follow
            return set()
        predictions: set[str] = set()
        forward = False
        if isinstance(root, FunctionNode):
            predictions = (fed & parameter_names(root)) | self._prediction_parameters(root)
            forward = self.is_model_forward(root)
        # a size is no prediction, whatever its name (``n_pred_ch = input.shape[1]``)
        # in a loss function, a list built by ``append`` holds what is appended
        # (``kernel.append(kl)`` ... ``kernel = torch.stack(kernel)``)
        losing = isinstance(root, FunctionNode) and self.is_loss_function(root)
        made = [*bindings, *(_appended(self.nodes(root)) if losing else [])]
        valued = [(names, value) for names, value in made if not _describes(value)]
        changed = True
        while changed:
            changed = False
            for names, value in valued:
                if not names <= predictions and (
                    any(vocab.is_prediction_name(n) for n in names)
                    or self._calls_model(value)
                    or (forward and _calls_own_part(value))
                    or bool(_values_in(value) & predictions)
                ):
                    predictions |= names
                    changed = True
        return predictions & fed

    def _names_reaching_a_loss(
        self, root: ast.AST, bindings: list[tuple[set[str], ast.expr]], callers: bool = True
    ) -> set[str]:
        """Names the scope computes its loss from: arguments of a loss call, values bound
        to a loss, what a loss function returns, and what a function returns that a
        training caller in the file computes its loss from (``per_token_logps =
        self._get_per_token_logps(model, ids)`` in ``compute_loss``). A parameter re-bound
        to a model's output (``def forward(self, x): x = nan_to_num(x); x =
        self.layer(x)``) was first the input, which may be cleaned: parameters are left
        out, but for a loss function's predictions (``def dice_loss(y_true, y_pred)``),
        which the model made."""
        sources: list[ast.AST] = [v for names, v in bindings if any(map(vocab.is_loss_name, names))]
        function = root if isinstance(root, ast.FunctionDef | ast.AsyncFunctionDef) else None
        returns_loss = function is not None and (
            self.is_loss_function(function) or function.name in self._loss_parts
        )
        feeds_a_loss = callers and function is not None and self._feeds_a_loss(function)
        if callers and function is not None:
            sources.extend(self._stored_under_a_loss_key(function))
        for node in self.nodes(root):
            if isinstance(node, ast.Call) and vocab.is_loss_name(self.called(node.func)):
                sources.extend([*node.args, *(k.value for k in node.keywords)])
            elif isinstance(node, ast.Return) and node.value is not None and returns_loss:
                sources.append(_loss_returned(node.value))
            elif isinstance(node, ast.Return) and node.value is not None and feeds_a_loss:
                sources.append(node.value)
        fed = set().union(*(_names_in(source) for source in sources))
        if not fed:
            return fed  # no loss computed here: nothing to follow back
        # and what those are computed from (``ratio`` from ``mu``, a list from what is
        # appended to it), but through no call a gradient does not flow back through
        made_from = [
            (names, _values_in(value))
            for names, value in [*bindings, *_appended(self.nodes(root))]
            if not self._cuts(value)
        ]
        changed = bool(fed)
        while changed:
            changed = False
            for names, used in made_from:
                if names & fed and not used <= fed:
                    fed |= used
                    changed = True
        if function is None:
            return fed
        return fed - (parameter_names(function) - self._prediction_parameters(function))

    def _feeds_a_loss(self, function: FunctionNode) -> bool:
        """Does a caller in the file that trains compute its loss from what ``function``
        returns? Only a function that returns a value and runs a model can hand back
        predictions; only a caller that binds its result to, or hands it to, a loss
        counts; evaluation, plots and tests train nothing."""
        key = ("feeds_a_loss", str(function.lineno))
        if key not in self._helper_memo:
            self._helper_memo[key] = self._returns_model_output(function) and any(
                self._computes_loss_from(caller_key, function.name)
                for caller_key in self._callers_by_name.get(function.name, ())
            )
        return self._helper_memo[key]

    @cached_property
    def _callers_by_name(self) -> dict[str, list[int]]:
        """The functions that call each same-file function by name, by their line."""
        found: dict[str, list[int]] = {}
        for key, (caller, _) in self._functions.items():
            for node in self.nodes(caller):
                name = self.helper_name(node.func) if isinstance(node, ast.Call) else None
                if name is not None and name != caller.name:
                    found.setdefault(name, []).append(key)
        return found

    def _computes_loss_from(self, caller_key: int, name: str) -> bool:
        if self.in_test(caller_key):
            return False
        caller, _ = self._functions[caller_key]
        if not self.only_observes(caller_key) and self._binds_loss_from(caller, name):
            return True
        # stored under a key that a loss reads back (a rollout's old log-probs, made
        # without gradient and read by ``compute_loss``): no_grad does not make it a log
        return not vocab.names_evaluation(caller.name) and any(
            map(self._key_feeds_a_loss, self._keys_stored_from(caller, name))
        )

    def _binds_loss_from(self, caller: FunctionNode, name: str) -> bool:
        fed = self._own_loss_names(caller)
        values = [value for names, value in self.bindings(caller) if names & fed]
        values += [
            argument
            for node in self.nodes(caller)
            if isinstance(node, ast.Call) and vocab.is_loss_name(self.called(node.func))
            for argument in [*node.args, *(k.value for k in node.keywords)]
        ]
        return any(self._calls_helper(value, name) for value in values)

    def _calls_helper(self, value: ast.AST, name: str) -> bool:
        """Does ``value`` call the same-file function ``name``?"""
        return any(
            isinstance(node, ast.Call) and self.helper_name(node.func) == name
            for node in ast.walk(value)
        )

    def _keys_stored_from(self, caller: FunctionNode, name: str) -> set[str]:
        """The string keys ``caller`` stores what ``name`` returns under
        (``data["old_logps"] = logps``, ``{"old_logp": logprobs(...)}``)."""
        held = {
            n
            for names, value in self.bindings(caller)
            if self._calls_helper(value, name)
            for n in names
        }
        return {
            key
            for key, value in _stored_by_key(self.nodes(caller))
            if self._calls_helper(value, name) or _values_in(value) & held
        }

    def _key_feeds_a_loss(self, key: str) -> bool:
        """Does a training function in the file compute its loss from what it reads
        under ``key`` (``old_logps = inputs.get("old_logps")``, ``batch["old_values"]``)?
        Asked only for keys something stores; each reader is followed once."""
        memo = ("key_feeds_a_loss", key)
        if memo not in self._helper_memo:
            self._helper_memo[memo] = any(
                self._reads_into_its_loss(line, names)
                for line, names in self._key_readers.get(key, ())
            )
        return self._helper_memo[memo]

    @cached_property
    def _key_readers(self) -> dict[str, list[tuple[int, set[str]]]]:
        """For each string key read in the file, the functions reading it (by line) and
        the names each binds from it."""
        found: dict[str, list[tuple[int, set[str]]]] = {}
        for line, (function, _) in self._functions.items():
            read: dict[str, set[str]] = {}
            for names, value in self.bindings(function):
                for node in ast.walk(value):
                    key = string_key(node)
                    if key is not None:
                        read.setdefault(key, set()).update(names)
            for key, names in read.items():
                found.setdefault(key, []).append((line, names))
        return found

    def _reads_into_its_loss(self, line: int, names: set[str]) -> bool:
        if self.in_test(line) or self.only_observes(line):
            return False
        function, _ = self._functions[line]
        return any(map(vocab.is_loss_name, names)) or bool(names & self._own_loss_names(function))

    def _own_loss_names(self, function: FunctionNode) -> set[str]:
        """What ``function`` computes its own loss from, its callers left aside: asked of
        each caller of a helper and each reader of a key, computed once."""
        if function.lineno not in self._reaching_memo:
            self._reaching_memo[function.lineno] = self._names_reaching_a_loss(
                function, self.bindings(function), callers=False
            )
        return self._reaching_memo[function.lineno]

    def _stored_under_a_loss_key(self, function: FunctionNode) -> list[ast.expr]:
        """What ``function`` stores under a key a training function reads into its loss
        (``outputs["train_output"] = rgb`` in a model's ``get_outputs``, read by its
        ``get_loss_dict``): the loss is computed from it, in another method."""
        stored = [
            (key, value)
            for key, value in _stored_by_key(self.nodes(function))
            if key in self._key_readers
        ]
        if not stored or self.only_observes(function.lineno):
            return []
        return [value for key, value in stored if self._key_feeds_a_loss(key)]

    def _returns_model_output(self, function: FunctionNode) -> bool:
        """Does ``function`` return a value and bind or return a model's output?"""
        nodes = self.nodes(function)
        returns = [n.value for n in nodes if isinstance(n, ast.Return) and n.value is not None]
        if not returns:
            return False
        bindings = self.bindings(function)
        return any(
            vocab.is_prediction_name(name) for names, _ in bindings for name in names
        ) or any(self._calls_model(value) for value in [*(v for _, v in bindings), *returns])

    def _prediction_parameters(self, function: FunctionNode) -> set[str]:
        """The parameters of a loss function that hold the model's predictions: those
        named so (``def dice_loss(y_true, y_pred)``), and those a loss function hands its
        predictions in through (``tversky_term(y_true, y_pred)`` called in ``dice_loss``)."""
        if self.is_loss_function(function):
            parameters = parameter_names(function)
            # torch's loss modules take ``forward(self, input, target)``: the input is
            # the model's output
            given = {"input"} & parameters if parameters & {"target", "targets"} else set()
            named = set(filter(vocab.is_prediction_name, parameters)) | given
            if named or not _called_a_loss(function):
                return named
            if any(self._calls_model(value) for _, value in self.bindings(function)):
                return named  # it runs the model itself: what it is given is the data
            # a loss is computed from the model's output: where no parameter is named for
            # it (``def kl_exploration_loss(self, action_distribution, valids)``), those
            # that name no label, mask, weight, size or setting hold it. Only a function
            # called a loss: ``entropy(mu)`` in a statistics library is plain maths.
            settings = self._settings(function, self.bindings(function))
            return {p for p in parameters if _may_hold_predictions(p)} - settings
        return self._loss_parts.get(function.name, set())

    @cached_property
    def _loss_parts(self) -> dict[str, set[str]]:
        """Same-file functions a loss function calls with its predictions, and the
        parameters those arrive in: such a function computes a part of the loss."""
        parts: dict[str, set[str]] = {}
        for function, _ in self._functions.values():
            if not self.is_loss_function(function):
                continue
            predictions = self._prediction_parameters(function)
            for node in self.nodes(function) if predictions else ():
                if not isinstance(node, ast.Call):
                    continue
                name = self.helper_name(node.func)
                if name is None or vocab.is_loss_name(name) or name in _LOSS_ENTRY_METHODS:
                    continue  # ``forward`` is every module's: calling one runs a module
                for helper in self.functions_named(name):
                    fed = _parameters_given(helper, node, predictions)
                    if fed:
                        parts.setdefault(name, set()).update(fed)
        return parts

    def _cuts(self, value: ast.expr) -> bool:
        """Does ``value`` go through a call no gradient flows back through?"""
        return any(
            isinstance(node, ast.Call) and self.called(node.func) in vocab.NO_GRADIENT_CALLS
            for node in ast.walk(value)
        )

    def _calls_model(self, value: ast.expr) -> bool:
        """Is ``value`` computed by calling a model (``model(x)``, ``self.proj(x)``,
        ``state.apply_fn(params, x)``, ``self.encoder.extract_features(x)``)?"""
        for node in ast.walk(value):
            if isinstance(node, ast.Call):
                chain = (dotted_name(node.func) or "").split(".")
                if any(vocab.is_model_name(part) for part in chain if part != "self"):
                    return True
        return False

    def is_guarded(self, key: int) -> bool:
        """Does the function on line ``key`` raise, or record a failed finiteness test
        (return it, store it, pass it on) so that a caller can raise?"""
        entry = self._functions.get(key)
        root: ast.AST = entry[0] if entry else self.tree
        return self._raises(root) or self._records(root, self.scope(key))


def _running_statistic(value: ast.expr) -> bool:
    """``self.xyz_gradient_accum / self.denom``: one buffer the object keeps divided by
    another, a running mean (of gradient norms over visits, of losses over steps) that
    the object records; no live training signal, whatever its name."""
    return (
        isinstance(value, ast.BinOp)
        and isinstance(value.op, ast.Div)
        and _kept_by_self(value.left)
        and _kept_by_self(value.right)
    )


def _kept_by_self(node: ast.expr) -> bool:
    while isinstance(node, ast.Subscript):
        node = node.value
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _appended(nodes: list[ast.AST]) -> list[tuple[set[str], ast.expr]]:
    """(container, value) for each ``chunks.append(value)``, ``chunks.extend(values)`` or
    ``buffer[i, :n] = value`` among one scope's nodes: a list or a preallocated buffer
    filled chunk by chunk is made from what is put into it."""
    found: list[tuple[set[str], ast.expr]] = []
    for node in nodes:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "extend")
            and isinstance(node.func.value, ast.Name)
            and len(node.args) == 1
        ):
            found.append(({node.func.value.id}, node.args[0]))
        elif isinstance(node, ast.Assign):
            found.extend(
                ({target.value.id}, node.value)
                for target in node.targets
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
            )
    return found


def _stored_by_key(nodes: list[ast.AST]) -> list[tuple[str, ast.expr]]:
    """(key, value) for each value one scope stores under a string key:
    ``data["old_logps"] = logps``, ``{"train_output": rgb}``."""
    stored: list[tuple[str, ast.expr]] = []
    for node in nodes:
        if isinstance(node, ast.Assign):
            stored.extend((key, node.value) for key in map(string_key, node.targets) if key)
        elif isinstance(node, ast.Dict):
            stored.extend(
                (key.value, value)
                for key, value in zip(node.keys, node.values, strict=True)
                if isinstance(key, ast.Constant) and isinstance(key.value, str)
            )
    return stored


def _calls_own_part(value: ast.expr) -> bool:
    """``self.field(samples)``, ``self.renderer_rgb(rgb=..., weights=...)``: in a model's
    forward method, a call on ``self`` runs one of the model's parts."""
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
        for node in ast.walk(value)
    )


def _called_a_loss(function: FunctionNode) -> bool:
    """``def transformed_n_step_loss``, ``class KLLoss: def forward``: named a loss, not
    only with a loss word (``entropy``, ``nll``, ``mse``), which maths libraries use."""
    return "loss" in vocab.name_words(function.name) or function.name in _LOSS_ENTRY_METHODS


def _may_hold_predictions(parameter: str) -> bool:
    """Could a loss function's ``parameter`` hold the model's output: not a label, a mask
    or weight, a size or count, a setting, a random key, the batch of data?"""
    return not (
        vocab.is_label_name(parameter)
        or vocab.is_measure_name(parameter)
        or vocab.is_config_name(parameter)
        or set(vocab.name_words(parameter)) & _NOT_PREDICTION_WORDS
    )


# Words of a loss function's parameters that hold no prediction: masks and weights,
# random keys, and the data itself (``batch["decoder_target_tokens"]``).
_NOT_PREDICTION_WORDS = frozenset(
    {"mask", "masks", "weight", "weights", "valid", "valids", "key", "rng"}
    | {"batch", "batches", "data", "inputs", "features", "tokens", "ids", "example", "examples"}
)
