"""A project, and the base of the forms of what lives in one (its name unique in the project)."""

from django import forms

from portal.accounts.models import Team

from .. import rules
from ..models import Project


class ProjectForm(forms.ModelForm):
    """Create (with ``teams``, the user's writable teams) or edit (without) a project."""

    class Meta:
        model = Project
        fields = ["name", "description"]
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}

    def __init__(self, *args, teams=None, **kwargs):
        super().__init__(*args, **kwargs)
        if teams is not None:
            if len(teams) > 1:
                self.fields["team"] = forms.ModelChoiceField(
                    queryset=Team.objects.filter(pk__in=[t.pk for t in teams]).order_by("name"),
                    to_field_name="code",
                    help_text="Its members will see the project; editors can change it.",
                )
            else:
                self.instance.team = teams[0]

    def clean(self):
        cleaned = super().clean()
        team = cleaned.get("team") if "team" in self.fields else self.instance.team
        name = cleaned.get("name")
        if team and name:
            clash = Project.objects.filter(team=team, name__iexact=name).exclude(pk=self.instance.pk)
            if clash.exists():
                self.add_error("name", f"{team} already has a project called “{name}”.")
        return cleaned


class ProjectScopedForm(forms.ModelForm):
    """A form for something that lives in a project; its name is unique in the project."""

    name_taken = "This project already has one called “{name}”."

    def __init__(self, *args, project: Project, **kwargs):
        super().__init__(*args, **kwargs)
        self.project = project
        self.instance.project = project

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        model = self._meta.model
        if messages := rules.name_taken(
            model, project=self.project, name=name, exclude_pk=self.instance.pk, message=self.name_taken
        ):
            raise forms.ValidationError(messages)
        return name
