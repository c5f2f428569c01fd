"""Who is asking, and may they: the existing hashed ApiToken (Bearer) or a session with CSRF, and
the admin's own permissions (harness_site/audit/roles.py groups), narrowed by a token's scopes."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from harness_site.api.tokens import bearer_credential, token_find
from tasks.models import ApiToken


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <token>` (harness_site.api.tokens): an ApiToken acting with its user's
    permissions, within its scopes. No header: the next authenticator (a session) is asked."""

    def authenticate(self, request):
        token = bearer_credential(request)
        if token is None:
            return None
        found = token_find(token)
        return found.user, found

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class BearerScheme(OpenApiAuthenticationExtension):
    target_class = BearerTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "`manage.py harness token create NAME --user U`"}


class DeskPermission(permissions.BasePermission):
    """The view's `required_perms` for the request's method (admin permission names, e.g.
    "tasks.pause_rule"): all must be held by the user, exactly as the admin checks them (superusers
    hold all). A token must also carry the view's `scope_area` with :read (GET) or :write."""

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            raise exceptions.NotAuthenticated("Authentication required: a Bearer token or a logged-in session.")
        perms = view.required_perms_for(request)
        missing = [p for p in perms if not user.has_perm(p)]
        if missing:
            raise exceptions.PermissionDenied(f"permission {missing[0]!r} required")
        if isinstance(request.auth, ApiToken):
            scope = f"{view.scope_area}:{'read' if request.method in permissions.SAFE_METHODS else 'write'}"
            if not request.auth.allows(scope):
                raise exceptions.PermissionDenied(f"this token lacks the scope {scope!r}")
        return True
