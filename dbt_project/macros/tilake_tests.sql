{# Generic tests of our own (no dbt deps offline). #}

{% test tilake_unique_combination(model, columns) %}
select {{ columns | join(', ') }}, count(*) as n
from {{ model }}
group by {{ columns | join(', ') }}
having count(*) > 1
{% endtest %}

{% test tilake_is_empty(model) %}
select * from {{ model }}
{% endtest %}

{% test tilake_not_negative(model, column_name) %}
select * from {{ model }} where {{ column_name }} < 0
{% endtest %}
